"""early_exit: greedy output == vanilla on every subtask across options; sampling is lossless."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest

from specharness.methods.early_exit import EarlyExitDrafter
from specharness.distributions import chi_square, exact_sequence_distribution, marginal
from specharness.api import Proposal
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.plugins import build_registry
from specharness.runner import Settings, build_method
from specharness.model import TargetModel
from specharness.verify import speculative_sampling

NEW_TOKENS = 24
# one option set per subtask (in SUBTASKS order), covering shallow/deep exits, gamma 1..6, eta on/off
OPTION_SETS = [
    {},  # defaults: exit_layer 2, gamma 6, eta 0
    {"exit_layer": 1, "gamma": 1},
    {"exit_layer": 29, "gamma": 6},  # the deepest exit: most drafts accepted, bonus tokens exercised
    {"exit_layer": 8, "gamma": 3, "eta": 0.5},
    {"exit_layer": 20, "gamma": 4, "eta": 0.1},
    {"exit_layer": 26, "gamma": 2},
]


def assert_same_or_near_tie(target, prompt: list[int], ref: list[int], out: list[int], label: str) -> None:
    """Token-for-token identity; a divergence passes only as a float32 near-tie (the target's top-2
    margin < 1e-4 there and the method took the runner-up: ``specharness.identity.classify``), and
    is then reported, never hidden."""
    from specharness.identity import TOLERANCES, classify, top2_margin
    if out == ref:
        return
    i = next((j for j, (a, b) in enumerate(zip(ref, out)) if a != b), min(len(ref), len(out)))
    margin, top1, top2 = top2_margin(target, prompt + ref[:i])
    mt = out[i] if i < len(out) else None
    msg = (f"{label}: first divergence at generated token {i} (vanilla {ref[i] if i < len(ref) else 'end'}, "
           f"method {mt if mt is not None else 'end'}); target top-2 logit margin there {margin:.3g}")
    assert classify(margin, TOLERANCES["float32"], mt, top1, top2) == "near-tie", msg
    warnings.warn("float32 near-tie, allowed: " + msg)
    print("NEAR-TIE " + msg)


@pytest.fixture(scope="module")
def prompts(smol, first_questions):
    return [(q.subtask, smol.chat_ids([{"role": "user", "content": q.turns[0]}])) for q in first_questions]


def test_greedy_equals_vanilla_on_every_subtask(smol, vanilla_greedy, prompts):
    reg = build_registry()
    assert len(prompts) == len(OPTION_SETS)
    for (subtask, ids), opts in zip(prompts, OPTION_SETS):
        ref = vanilla_greedy(ids, NEW_TOKENS)
        method = build_method(reg, "early_exit", {k: str(v) for k, v in opts.items()}, smol, 0.0)
        out = method.generate(ids, Settings(max_new_tokens=NEW_TOKENS), 0)
        assert len(out.token_ids) == len(ref)
        drafted = sum(r.drafted for r in out.rounds)
        assert drafted > 0 and len(out.rounds) <= len(ref)  # it really drafted and verified
        assert_same_or_near_tie(smol, ids, ref, out.token_ids, f"early_exit {opts or 'defaults'} on {subtask}")


def test_runs_through_the_runner_with_options(smol, prompts):
    """The registered method (-o parsing, build per generation) gives the same tokens."""
    from specharness.runner import run_question
    from specharness.tasks.specbench import Question
    reg = build_registry()
    m = build_method(reg, "early_exit", ["exit_layer=29", "gamma=3"], smol, 0.0)
    v = build_method(reg, "vanilla", [], smol, 0.0)
    assert m.changed == {"exit_layer": 29, "gamma": 3} and m.extra_params == 0
    q = Question("t", "qa", "qa", ("Name three primary colours.",))
    s = Settings(max_new_tokens=12)
    a, b = run_question(smol, m, q, s), run_question(smol, v, q, s)
    assert a.generations[0].token_ids == b.generations[0].token_ids


# ---- sampling: chi-square against the exact target distribution on a tiny model ------------------
VOCAB, PROMPT, SAMPLES = 16, [3, 1, 4], 1500


def exact_marginals(target, prompt: list[int], depth: int, temperature: float = 1.0) -> list[dict]:
    """P(token j of the output) for j = 1..depth, from the exact joint (``specharness.distributions``)."""
    joint = exact_sequence_distribution(target, prompt, depth, temperature)
    return [marginal(joint, j) for j in range(depth)]


def chi_square_p(samples: list[int], probs: dict) -> float:
    """The lossless suite's own chi-square test (sparse cells pooled) of samples against ``probs``."""
    return chi_square(Counter(samples), probs).p_value


@pytest.fixture(scope="module")
def tiny():
    target = TargetModel.tiny("llama", vocab_size=VOCAB, n_layers=4, seed=11)
    return target, exact_marginals(target, PROMPT, 3)


def sample_tokens(target, make_drafter, n: int = SAMPLES) -> tuple[list[list[int]], int, int]:
    outs, drafted, accepted = [], 0, 0
    for seed in range(n):
        g = generate(target, make_drafter(), speculative_sampling, PROMPT, 4, 1.0, seed)
        outs.append(g.token_ids)
        drafted += sum(r.drafted for r in g.rounds)
        accepted += sum(r.accepted for r in g.rounds)
    return outs, drafted, accepted


@pytest.mark.parametrize("exit_layer, gamma, eta", [(2, 6, 0.0), (1, 6, 0.5)])
def test_sampling_is_lossless(tiny, exit_layer, gamma, eta):
    """Token 1 comes from the prefill; tokens 2 and 3 from the first verified round (up to 2 drafts,
    as max_new_tokens = 4): their marginals must match the exact target distribution."""
    target, marg = tiny
    outs, drafted, accepted = sample_tokens(target, lambda: EarlyExitDrafter(target, exit_layer, gamma, eta))
    assert 0.1 * drafted < accepted < 0.9 * drafted  # both acceptance and rejection are exercised
    for j in (1, 2):
        p = chi_square_p([o[j] for o in outs], marg[j])
        assert p > 1e-3, f"token {j + 1}: chi-square p = {p:.2e} against the exact target distribution"


class _WrongQ(EarlyExitDrafter):
    """A broken drafter: samples from q but hands over a sharper q (q^2, renormalised).

    (Hiding q altogether would not do: a point-mass q is lossless for drafts drawn from anything.)
    """

    def propose(self, state):
        prop = super().propose(state)
        q = prop.q.pow(2) if prop.q is not None else None
        return Proposal(prop.tokens, q / q.sum(-1, keepdim=True) if q is not None else None,
                        prop.hidden, prop.layer)


def test_chi_square_has_power_against_a_lossy_drafter(tiny):
    target, marg = tiny
    outs, _, _ = sample_tokens(target, lambda: _WrongQ(target, 2, 6, 0.0), n=1000)
    p = min(chi_square_p([o[j] for o in outs], marg[j]) for j in (1, 2))
    assert p < 1e-3, f"the sample size cannot tell a lossy drafter apart (p = {p:.2e})"


# ---- options ------------------------------------------------------------------------------------
@pytest.mark.parametrize("opts, needle", [
    (["exit_layer=0"], "exit_layer"),
    (["exit_layer=4"], "1..3"),
    (["gamma=0"], "gamma"),
    (["eta=1.5"], "eta"),
    (["eta=-0.1"], "eta"),
    (["gamma=two"], "gamma"),
    (["depth=3"], "no option 'depth'"),
])
def test_bad_options_are_one_line_usage_errors(tiny, opts, needle):
    target, _ = tiny
    with pytest.raises(UsageError) as err:
        build_method(build_registry(), "early_exit", opts, target, 0.0)
    assert needle in str(err.value) and "\n" not in str(err.value)
