"""The plugin contract (pluggy, project name ``specharness``): every hook in one module.

A plugin is a plain module (or object) with ``@hookimpl`` functions named as below. Built-ins
(``specharness.verify``, ``specharness.methods.*``) and third parties alike register through the
entry-point group ``specharness`` (or ``--plugin MODULE_OR_FILE.py``); report sections through
``specharness.report``. A misspelt hook name is an error, not a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import pluggy

from .options import OptionSpec

if TYPE_CHECKING:
    from .records import QuestionResult, Round
    from .report.runs import Run
    from .report.sections import Section


@dataclass(frozen=True)
class RoundContext:
    """Where a round happened: the method (its label in a comparison), the question and the turn."""

    method: str
    question_id: int | str
    turn: int  # 0-based

hookspec = pluggy.HookspecMarker("specharness")
hookimpl = pluggy.HookimplMarker("specharness")


@dataclass(frozen=True)
class DrafterSpec:
    """A named drafter. ``build(target, options)`` returns an object with the Drafter interface
    (``specharness.api.Drafter``); the engine does everything else. It is built once per method
    and run on every prompt, so per-sequence state belongs in ``begin``."""

    name: str
    build: Callable[..., Any]
    options: list[OptionSpec] = field(default_factory=list)
    help: str = ""
    params: Callable[..., int] | None = None  # extra parameters the drafter adds, if any
    info: Callable[..., dict] | None = None  # what variant it is (e.g. adapter layout), kept in headers
    # options that build it on a tiny random model with nothing trained (lossless levels a and c),
    # e.g. {"adapter": "random"}; the user's options still win
    tiny_options: dict = field(default_factory=dict)
    # it cannot sample (an oracle that compares drafts with the greedy answer): a run or lossless
    # level at a temperature > 0 is refused with one line before anything is spent
    greedy_only: bool = False
    # with room for n drafts it proposes the first n nodes of what it proposes unbounded (a chain's
    # first n, or a tree listed parents first, best first): it then takes the option ``budget``, and
    # ``budget=auto`` sizes each round from measured costs (``specharness.budget``)
    sizable: bool = False
    # the default of that option: "max" (its own size every round) or "auto" (where auto measured faster)
    budget: str = "max"


@dataclass(frozen=True)
class DecoderSpec:
    """A baseline that decodes on its own (transformers' ``generate`` and its peers).
    ``build(target, options)`` returns ``decode(prompt_ids, max_new_tokens, temperature, seed) -> Generation``
    (``specharness.records.Generation``)."""

    name: str
    build: Callable[..., Any]
    options: list[OptionSpec] = field(default_factory=list)
    help: str = ""


@dataclass(frozen=True)
class VerifierSpec:
    """A named acceptance rule: ``accept(logits, drafts, q, temperature, generator) -> Acceptance``."""

    name: str
    accept: Callable[..., Any]
    sampling: bool
    help: str = ""


@dataclass(frozen=True)
class TrainerSpec:
    """A named trainer (``python -m specharness train NAME``).
    ``run(target, options, out_dir, resume) -> dict`` trains, checkpoints, and returns its report."""

    name: str
    run: Callable[..., Any]
    options: list[OptionSpec] = field(default_factory=list)
    help: str = ""


class Hooks:
    @hookspec
    def specharness_drafters(self) -> list[DrafterSpec]:
        """Drafters this plugin contributes (each becomes a method of the same name)."""

    @hookspec
    def specharness_decoders(self) -> list[DecoderSpec]:
        """Self-contained decoders (baselines that bypass the engine)."""

    @hookspec
    def specharness_verifiers(self) -> list[VerifierSpec]:
        """Acceptance rules this plugin contributes."""

    @hookspec
    def specharness_trainers(self) -> list[TrainerSpec]:
        """Trainers for the parameters a drafter needs (adapters, heads)."""

    @hookspec
    def specharness_round(self, record: "Round", context: RoundContext) -> None:
        """Observer: called after every draft -> verify -> accept round (and the prefill) of the
        first timed repeat; ``context`` says which method, question and turn it belongs to."""

    @hookspec
    def specharness_question_done(self, result: "QuestionResult") -> None:
        """Observer: called once a question (all its turns) has finished and been saved
        (``result.method`` is the method's label, ``result.question_id`` the question)."""

    @hookspec
    def specharness_report_sections(self, runs: "list[Run]") -> "list[Section]":
        """Tables, figures and notes a method adds to ``report``, built from the runs alone
        (``specharness.report.runs``); registered through the entry-point group
        ``specharness.report`` so the report never imports a method's drafter."""
