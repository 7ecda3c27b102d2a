"""Running methods over questions: turns, truncation, warm-up, repeats in rotating order.

For every question each method runs ``repeats`` times, the method order rotating from one
repeat (and question) to the next (A B C, B C A, ...), so drift of a shared, noisy machine falls
on all methods alike. The first repeat's outputs are kept; later repeats must reproduce them
token for token (greedy, or sampling with the same seed), else the run stops with an error.
"""

from __future__ import annotations

import statistics
import sys
import time
import zlib
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Callable

import torch
from tqdm import tqdm

from .budget import OPTION as BUDGET, AutoBudget, FixedSize
from .engine import generate
from .errors import UsageError, blamed_on
from .hookspecs import DecoderSpec, RoundContext
from .options import resolve_options
from .plugins import Registry
from .records import Generation, QuestionResult, Round
from .model import TargetModel
from .tasks.specbench import Question
from .width_curve import FASTER, choose_route, verify_seconds


@dataclass(frozen=True)
class Settings:
    max_new_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    repeats: int = 1
    warmup: int = 1


@dataclass
class Method:
    """A method ready to run: its name, resolved options, verifier and ``generate`` callable."""

    name: str
    options: dict
    verifier: str
    generate: Callable[..., Generation]  # (prompt_ids, settings, seed, on_round) -> Generation
    extra_params: int = 0
    changed: dict = field(default_factory=dict)  # options that differ from their defaults
    defaults: dict = field(default_factory=dict)  # every option's declared default (kept in headers)
    label: str = ""  # how compare names this variant (e.g. "kangaroo:eta=0.4"); defaults to name
    info: dict = field(default_factory=dict)  # the drafter's own description (DrafterSpec.info)
    max_width: int = 1  # widest verification forward the method can ask for (compiled before timing)
    verify_layer: int = 0  # the layer its drafts enter verification at (the drafter's exit layer)
    draft_bytes: int = 0  # weights one draft token reads (the drafter's byte roofline; 0: none, or not said)
    # budget=auto: calibrate(prompt_ids) measures its costs once, after warm-up (None: the method's own size)
    calibrate: Callable[[list[int]], dict] | None = None
    # a sizable drafter's generation with every round at draft size n: (prompt_ids, settings, seed, n) -> Generation
    at_size: Callable[..., Generation] | None = None

    def __post_init__(self) -> None:
        self.label = self.label or self.name


def check_settings(settings: Settings) -> None:
    if settings.max_new_tokens <= 0:
        raise UsageError(f"--max-new-tokens must be positive, got {settings.max_new_tokens}")
    if not 0 <= settings.temperature < float("inf"):
        raise UsageError(f"--temperature must be a number >= 0 (0: greedy), got {settings.temperature}")
    if settings.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {settings.repeats}")
    if settings.warmup < 0:
        raise UsageError(f"--warmup must be >= 0, got {settings.warmup}")


def resolve_verifier(registry: Registry, name: str | None, temperature: float):
    """The named verifier, or the right default; a verifier for the other regime is refused."""
    sampling = temperature > 0
    vspec = registry.verifier(name or ("speculative-sampling" if sampling else "greedy"))
    if vspec.sampling != sampling:
        need = "a temperature > 0" if vspec.sampling else "--temperature 0"
        raise UsageError(f"verifier '{vspec.name}' needs {need}; drop --verifier to pick the right one")
    return vspec


def check_sampling(registry: Registry, name: str, temperature: float) -> None:
    """A greedy-only method at a temperature > 0 is one line, before anything loads or runs."""
    if temperature > 0 and getattr(registry.method(name), "greedy_only", False):
        raise UsageError(f"method '{name}' is greedy only; use --temperature 0 (or leave it out of sampling checks "
                         "with --levels greedy)")


def _built(spec, target: TargetModel, options: dict):
    """``spec.build(target, options)``, a factory's crash said in one line naming the method."""
    with blamed_on(f"building method '{spec.name}'"):
        return spec.build(target, options)


def build_method(registry: Registry, name: str, raw_options: list[str] | dict, target: TargetModel,
                 temperature: float, verifier: str | None = None) -> Method:
    """Resolve options and the verifier, build the drafter, and wrap it in the engine."""
    spec = registry.method(name)
    check_sampling(registry, name, temperature)
    options = resolve_options(name, spec.options, raw_options)
    defaults = {o.name: o.default for o in spec.options}
    changed = {k: v for k, v in options.items() if v != defaults[k]}
    if isinstance(spec, DecoderSpec):
        decode = _built(spec, target, options)
        return Method(name, options, "own",
                      lambda ids, s, seed, on_round=None: decode(ids, s.max_new_tokens, s.temperature, seed),
                      changed=changed, defaults=defaults)
    vspec = resolve_verifier(registry, verifier, temperature)
    vname = vspec.name
    drafter = _built(spec, target, options)  # once: options checked and weights loaded now, not mid-run
    max_width, verify_layer = int(getattr(drafter, "max_width", 1)), int(getattr(drafter, "exit_layer", 0))
    auto = AutoBudget(target, max_width - 1, verify_layer) if options.get(BUDGET.name) == "auto" else None

    def at_size(ids: list[int], s: Settings, seed: int, n: int) -> Generation:  # calibration, the profile's cost line
        return generate(target, drafter, vspec.accept, ids, s.max_new_tokens, s.temperature, seed, sizer=FixedSize(n))

    def calibrate(ids: list[int]) -> dict:  # the method at each size, untimed, for its costs
        return auto.calibrate(lambda p, tokens, n: at_size(p, Settings(tokens, temperature), 0, n).rounds, ids)

    def run(ids: list[int], s: Settings, seed: int, on_round=None) -> Generation:
        if auto and auto.costs is None:  # warm_up calibrates before timing; other callers here, outside the timer
            calibrate(ids)
        return generate(target, drafter, vspec.accept, ids, s.max_new_tokens, s.temperature, seed, on_round,
                        auto.sizer() if auto else None)

    extra = spec.params(target, options) if spec.params else 0
    info = spec.info(target, options) if spec.info else {}
    return Method(name, options, vname, run, extra, changed, defaults, info=info, max_width=max_width,
                  verify_layer=verify_layer, draft_bytes=int(getattr(drafter, "draft_bytes", 0)),
                  calibrate=calibrate if auto else None, at_size=at_size if spec.sizable else None)


def question_seed(seed: int, question_id) -> int:
    return (seed * 1_000_003 + zlib.crc32(str(question_id).encode())) % 2**31


MAX_PROMPT_TOKENS = 2048  # above Spec-Bench's longest prompt (1,598 SmolLM2 tokens): no Spec-Bench turn is cut


def prompt_room(target: TargetModel, max_new_tokens: int) -> int:
    """How many prompt tokens a turn may hold: what the context (and a sliding window) leaves for the
    answer, and at most ``MAX_PROMPT_TOKENS``. A prefill's attention grows with the square of its
    length: 8,184 tokens of SmolLM2 (its full context) took over 300 s in float32 eager (issue 33)."""
    context = min(target.max_context, target.sliding_window or target.max_context)
    if context - max_new_tokens <= 0:
        raise UsageError(f"--max-new-tokens {max_new_tokens} leaves no room in the model's context "
                         f"({context}); lower it")
    return min(context - max_new_tokens, MAX_PROMPT_TOKENS)


def left_truncate(target: TargetModel, messages: list[dict], room: int) -> list[dict]:
    """``messages`` with their contents cut from the left, oldest first, until the chat-template ids
    fit ``room``: the template (system prompt, role markers, generation prompt) stays whole, so the
    model still reads a well-formed conversation. Each message's kept suffix is a binary search over
    characters: about 20 tokenisations of the conversation, never a forward."""
    out = [dict(m) for m in messages]

    def fits() -> bool:
        return len(target.chat_ids(out)) <= room

    for m in out:
        text, m["content"] = m["content"], ""
        if not fits():
            continue  # even emptied, too long: cut the next message too
        lo, hi = 0, len(text)  # the longest suffix that fits: lo fits, hi + 1 does not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            m["content"] = text[len(text) - mid:]
            lo, hi = (mid, hi) if fits() else (lo, mid - 1)
        m["content"] = text[len(text) - lo:]
        return out
    raise UsageError(f"the chat template alone exceeds {room} prompt tokens; lower --max-new-tokens")


def prompt_ids(target: TargetModel, messages: list[dict], max_new_tokens: int) -> tuple[list[int], int]:
    """Chat-template ids and how many tokens were cut: a prompt past ``prompt_room`` is
    left-truncated (``left_truncate``), so its prefill stays short."""
    ids = target.chat_ids(messages)
    room = prompt_room(target, max_new_tokens)
    if len(ids) <= room:
        return ids, 0
    kept = target.chat_ids(left_truncate(target, messages, room))
    return kept, len(ids) - len(kept)


def ask(target: TargetModel, messages: list[dict], text: str, max_new_tokens: int) -> tuple[list[int], int]:
    """Add a user turn to ``messages``: the prompt ids its answer starts from, and the tokens cut."""
    messages.append({"role": "user", "content": text})
    return prompt_ids(target, messages, max_new_tokens)


def answered(target: TargetModel, messages: list[dict], token_ids: list[int]) -> str:
    """Add the model's answer to ``messages`` as a later turn sees it, its decoded text; returns that text."""
    text = target.decode(token_ids)
    messages.append({"role": "assistant", "content": text})
    return text


def recorded_turns(target: TargetModel, record: dict, q: Question, max_new_tokens: int) -> list[tuple[list[int], list[int]]]:
    """A result record's turns as ``run_question`` ran them: each turn's prompt ids (chat template, the
    earlier answers as text, cut as the run cut them) beside the answer's token ids. Greedy answers are
    the target's whatever drafted them, so a token-only drafter's acceptance, or a head's agreement, can be
    replayed on them without generating (``results/smollm2-cpu-epyc-pld-votes/acceptance.py``)."""
    messages: list[dict] = []
    turns = []
    for text, answer in zip(q.turns, record["choices"][0]["token_ids"]):
        turns.append((ask(target, messages, text, max_new_tokens)[0], answer))
        answered(target, messages, answer)
    return turns


RoundObserver = Callable[[Round, RoundContext], None]
Warn = Callable[[str], None]


def run_question(target: TargetModel, method: Method, q: Question, s: Settings,
                 on_round: RoundObserver | None = None, warn: Warn | None = None) -> QuestionResult:
    """All turns of one question; a later turn sees the model's own earlier answers. ``warn`` gets
    one line for each turn whose prompt was cut, before that turn is generated."""
    seed = question_seed(s.seed, q.question_id)
    res = QuestionResult(q.question_id, q.category, q.subtask, method.label, seed=seed)
    messages: list[dict] = []
    for t, text in enumerate(q.turns):
        ids, cut = ask(target, messages, text, s.max_new_tokens)
        if cut and warn:
            warn(f"warning: question {q.question_id} turn {t + 1}: prompt of {len(ids) + cut} tokens left-truncated "
                 f"to {len(ids)} ({cut} cut; at most {prompt_room(target, s.max_new_tokens)} prompt tokens)")
        observe = None
        if on_round:
            context = RoundContext(method.label, q.question_id, t)
            observe = lambda rd, context=context: on_round(rd, context)  # noqa: E731
        with blamed_on(f"method '{method.label}' on question {q.question_id} turn {t + 1}"):  # a plugin's drafter too
            gen = method.generate(ids, s, seed + t, observe)
        res.turns.append(answered(target, messages, gen.token_ids))
        res.generations.append(gen)
        res.truncated.append(cut > 0)
        res.wall_time_repeats.append([gen.wall_time])
    return res


def stored_graphs(backend) -> dict:
    """How many of the run's graphs came from the graph store (loaded, built and kept), and which
    could not be packaged (they run through torch.compile)."""
    store = backend.store
    if store is None:
        return {}
    return {"graphs_loaded": len(store.loaded), "graphs_stored": len(store.built), "graph_builds_at_once": store.jobs,
            **({"graphs_not_stored": {k.describe(): why for k, why in store.failures.items()}} if store.failures else {})}


def warm_up(target: TargetModel, methods: list[Method], questions: list[Question], s: Settings) -> dict:
    """Untimed runs so lazy initialisation, allocator growth and compilation do not land on question
    one; a compiled target then compiles every width a timed round may need. Returns what it took.

    Every prefill, whatever the method, runs the one dynamic-width graph of the full model (it hands
    back every layer's states), so the first prompt compiles what every later one needs; rounds run
    static width buckets up to the widest verification of any method here (``expect_widths``);
    ``precompile`` then compiles, for each method, the buckets of the graphs it used up to its own
    widest verification."""
    started, compiled_before = time.perf_counter(), target.backend.compile_s
    max_width = max((m.max_width for m in methods), default=1)
    target.expect_widths(max_width)
    with target.backend.in_background():  # packages build in child processes while these forwards run eagerly
        if s.warmup and questions:
            short = Settings(min(16, s.max_new_tokens), s.temperature, s.seed)
            graphs = 0
            for m in methods:  # each method's own graphs, to its own widest verification: no graph nobody runs
                target.backend.used.clear()
                for _ in range(s.warmup):
                    run_question(target, m, Question("warmup", "qa", "qa", questions[0].turns[:1]), short)
                graphs += target.precompile(m.max_width, set(target.backend.used), m.verify_layer)
        else:
            graphs = target.precompile(max_width)
        stand_in = route_stand_in(target)
        if stand_in is None:
            graphs += precompile_vanilla_widths(target)
    target.backend.route = {}  # measured unrouted (an earlier warm-up in this process may have set one)
    check, curve = {}, None
    if stand_in is not None:  # the whole model's widest graph only where the layers standing in say it pays
        check = {"route_check": route_check(target, stand_in)}
        if check["route_check"]["built"]:  # built now, alone: the one case a first run pays more than before
            graphs += precompile_vanilla_widths(target)
        else:  # the curve is the narrow step the check just measured: one measurement, one number in the header
            curve = {int(w): ms / 1e3 for w, ms in check["route_check"]["whole_model_ms"].items()}
    curve = verify_curve(target) if curve is None else curve
    target.backend.route = choose_route(curve)
    budgets = calibrate_budgets(target, methods, questions, s)  # after the route: costs as the run will see them
    return {"warmup_s": time.perf_counter() - started, "compile_s": target.backend.compile_s - compiled_before,
            "compile_s_before_warmup": compiled_before,  # the engine's compile check (engine_choice.apply)
            "graphs": len(target.backend.graphs), "graphs_compiled_after_warmup_runs": graphs,
            **stored_graphs(target.backend),
            **({"budget": budgets} if budgets else {}),
            **({"verify_ms_by_width": {str(w): round(t * 1e3, 3) for w, t in curve.items()}} if curve else {}),
            **({"route": {str(w): r for w, r in target.backend.route.items()}} if target.backend.route else {}),
            **check}


def _verification_graphs(target: TargetModel, a: int) -> list:
    """The target's verification graphs from layer ``a`` (layers [a, L) and the head, nothing skipped or
    captured), compiled at static widths."""
    return [k for k in target.backend.graphs if k.a == a and k.b == target.n_layers and k.head and not k.capture
            and k.skip == ((), ()) and not k.stack and k.width != "wide"]


def _vanilla_graphs(target: TargetModel) -> list:
    """The whole model's verification graphs (vanilla's step among them), compiled at static widths."""
    return [k for k in _verification_graphs(target, 0) if k.ids]


def _vanilla_widths(target: TargetModel) -> set[int]:
    return {k.width for k in _vanilla_graphs(target)}


def route_stand_in(target: TargetModel) -> int | None:
    """The first layer of the verification graphs that decide whether the whole model's widest static graph
    is worth building, or None where nothing stands in for it (``precompile_vanilla_widths`` then builds it
    as it would). Where no method verifies through the whole model at the run's widest width but one
    verifies from a later layer at vanilla's width and that widest one (Kangaroo's layers [l, L)), those
    graphs have the whole model's matrix shapes at each width: their wide time, scaled to every layer,
    estimates the whole model's (``route_check``). A first run then builds that graph (the whole model at
    width 4 for Kangaroo's default gamma 3; width 8, ~100 s of a core on the 2-core EPYC, was measured)
    only where the estimate beats the whole model's measured narrow step, the case the route is for
    (``results/smollm2-cpu-epyc-first-run``); it is then built alone, after the other builds."""
    full, top = _vanilla_widths(target), target.backend.static_top if target.backend.compiled else 0
    if not full or top <= min(full) or top in full:
        return None
    narrow = min(full)
    for a in sorted({k.a for k in target.backend.graphs if k.a > 0}):
        if {narrow, top} <= {k.width for k in _verification_graphs(target, a)}:
            return a
    return None


def route_check(target: TargetModel, stand_in: int) -> dict:
    """Whether the whole model's widest static graph is worth building (``route_stand_in``): the stand-in's
    time at that width, scaled to every layer (L / (L - l)), against the whole model's own narrowest
    graph as measured now (a compile's narrow graph may be the slow one: ``width_curve``). Built where the
    estimate is <= ``FASTER`` of it, the rule the route itself applies. For the header."""
    narrow, top = min(_vanilla_widths(target)), target.backend.static_top
    stand = verify_seconds(target, stand_in, [narrow, top])
    whole = verify_seconds(target, 0, [narrow])[narrow]
    estimate = stand[top] * target.n_layers / (target.n_layers - stand_in)
    return {"layer": stand_in, "verify_ms_by_width": {str(w): round(t * 1e3, 3) for w, t in stand.items()},
            "whole_model_ms": {str(narrow): round(whole * 1e3, 3)}, "estimate_ms": {str(top): round(estimate * 1e3, 3)},
            "built": estimate <= FASTER * whole}


def precompile_vanilla_widths(target: TargetModel) -> int:
    """Compile the whole model's verification at this run's widest static width (its widest
    verification's bucket), so that vanilla's step may run padded to it where it measures faster
    (``width_curve``): one graph more at most, and never a width that would change which graph another
    forward takes. Returns the graphs compiled."""
    keys = _vanilla_graphs(target)
    top = target.backend.static_top if target.backend.compiled else 0
    if not keys or top <= min(k.width for k in keys) or keys[0]._replace(width=top) in target.backend.graphs:
        return 0
    before = len(target.backend.graphs)
    with torch.inference_mode():  # as the engine's forwards run: graphs guard on it
        cache = target.new_cache(64)
        target.forward(torch.zeros(top, dtype=torch.long, device=target.device), cache, 0, head=True)
    return len(target.backend.graphs) - before


def verify_curve(target: TargetModel) -> dict[int, float]:
    """Seconds of the whole model's verification forward at each width compiled for it (vanilla's step is
    the narrowest), measured now, before any route: max-autotune's kernel choices vary between compiles
    (``specharness.width_curve``), so a result keeps the curve its speedups were measured on."""
    if not target.backend.compiled:
        return {}
    widths = sorted(_vanilla_widths(target))
    return verify_seconds(target, 0, widths) if widths else {}


def calibrate_budgets(target: TargetModel, methods: list[Method], questions: list[Question], s: Settings) -> dict:
    """Each ``budget=auto`` method's costs, measured now (after compiling, before timing) on the first
    question's first turn: label -> what was measured (the run's header keeps it)."""
    todo = [m for m in methods if m.calibrate]
    if not todo:
        return {}
    turn = questions[0].turns[:1] if questions else ["Say hello."]
    ids, _ = prompt_ids(target, [{"role": "user", "content": turn[0]}], s.max_new_tokens)
    return {m.label: m.calibrate(ids) for m in todo}


def run_interleaved(target: TargetModel, methods: list[Method], q: Question, qi: int, s: Settings,
                    on_round: RoundObserver | None = None) -> list[QuestionResult]:
    """One question under every given method: ``s.repeats`` timed repeats, the method order rotating
    with the question's index ``qi`` and the repeat (A B C, B C A, ...); each result keeps every
    repeat's time and the median as its wall time. The unit of work, locally or on a worker."""
    kept: dict[str, QuestionResult] = {}
    said: set[str] = set()

    def warn(line: str) -> None:  # once per question, not once per method and repeat
        if line not in said:
            said.add(line)
            tqdm.write(line, file=sys.stderr)

    for r in range(s.repeats):
        shift = (qi + r) % len(methods)
        for m in methods[shift:] + methods[:shift]:
            res = run_question(target, m, q, s, on_round if r == 0 else None, warn)
            first = kept.setdefault(m.label, res)
            if first is not res:
                if [g.token_ids for g in res.generations] != [g.token_ids for g in first.generations]:
                    raise RuntimeError(f"{m.label} gave different tokens on repeat {r + 1} of question "
                                       f"{q.question_id}: the method is not deterministic for a seed")
                for times, g in zip(first.wall_time_repeats, res.generations):
                    times.append(g.wall_time)
    for res in kept.values():
        for times, g in zip(res.wall_time_repeats, res.generations):
            g.wall_time = statistics.median(times)
    return [kept[m.label] for m in methods]


def pending(methods: list[Method], questions: list[Question], done: dict[str, set]) -> list[tuple[int, Question, list[Method]]]:
    """(index, question, methods still to run on it) for every question with work left, taking the
    subtasks in turn (the first question of each, then the second, ...): a run stopped part-way has
    covered every subtask about equally, and ``--resume`` with a larger ``--limit`` extends them all."""
    by_subtask: dict[str, list] = {}
    for qi, q in enumerate(questions):
        todo = [m for m in methods if q.question_id not in done.get(m.label, set())]
        if todo:
            by_subtask.setdefault(q.subtask, []).append((qi, q, todo))
    return [item for turn in zip_longest(*by_subtask.values()) for item in turn if item is not None]


def run_all(target: TargetModel, methods: list[Method], questions: list[Question], s: Settings,
            done: dict[str, set], on_result: Callable[[QuestionResult], None],
            on_round: RoundObserver | None = None) -> None:
    """Every pending question under every method, results as they finish (call ``warm_up`` first)."""
    for qi, q, todo in pending(methods, questions, done):
        for res in run_interleaved(target, todo, q, qi, s, on_round):
            on_result(res)
