"""Greedy identity: whole turns compared with a resync at every divergence, and near-ties certified
against an independent float32 reference with a bound the code under test cannot widen."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from specharness import identity
from specharness.model import TargetModel
from specharness.plugins import build_registry
from specharness.runner import build_method
from specharness.tasks.specbench import Question

from test_lossless import PLUGIN


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_classify_takes_either_order_of_the_top_two():
    """Kernels may flip a near-tie either way: the pair of tokens is what must match."""
    assert identity.classify(5e-5, 1e-4, method_token=7, top1=3, top2=7) == "near-tie"
    assert identity.classify(5e-5, 1e-4, method_token=9, top1=3, top2=7) == "bug"  # not the runner-up
    assert identity.classify(0.3, 1e-4, method_token=7, top1=3, top2=7) == "bug"  # a clear preference
    assert identity.classify(1e-5, 1e-4, method_token=3, top1=3, top2=7, vanilla_token=7) == "near-tie"
    assert identity.classify(1e-5, 1e-4, method_token=9, top1=3, top2=7, vanilla_token=3) == "bug"


def test_the_bound_is_fixed_by_dtype_depth_and_top_logit_and_capped():
    """Nothing measured: the same for any model of that depth, and never past 2 x CAP_ULPS ulps."""
    tol = identity.tolerance_for(30, "bfloat16")
    assert tol.ulps == pytest.approx(2 * 0.5 * math.sqrt(30)) and tol.ulps <= 2 * identity.CAP_ULPS
    assert identity.tolerance_for(400, "bfloat16").ulps == 2 * identity.CAP_ULPS  # deep models hit the cap
    assert tol.at(20.0) == pytest.approx(tol.ulps * 0.125)  # bfloat16's ulp at 16..32 is 1/8
    assert tol.at(0.01) == identity.TOLERANCES["bfloat16"]  # the absolute floor
    assert identity.tolerance_for(30, "float32").at(20.0) == 1e-4
    assert identity.tolerance_for(30, "bfloat16", given=0.3).at(20.0) == 0.3


def test_reduced_precision_bounds_take_transformers_own_rounding_measured_off_the_engine(monkeypatch):
    """The bound's second term is what transformers' own bfloat16 forward does to the gaps: measured
    with the engine's forward broken (so none of its code can widen it), zero where the rounded
    forward is the float32 one, and absent in float32 or when --tolerance is given."""
    tiny = TargetModel.tiny("llama", vocab_size=64, n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2, seed=1,
                            dtype="bfloat16")
    ref = identity.Reference(tiny)

    def broken(*args, **kwargs):
        raise AssertionError("reference_noise ran the engine")
    monkeypatch.setattr(tiny, "forward", broken)
    noise, positions = identity.reference_noise(tiny, ref, "bfloat16")
    assert positions == len(identity.CALIBRATION_PROMPTS) * 128  # a fixed sample, whatever the text
    assert 0 < noise < 1, noise  # bfloat16 moves some gap, by rounding, not by logits
    assert identity.reference_noise(tiny, ref, "float32", tokens=16) == (0.0, len(identity.CALIBRATION_PROMPTS) * 16)
    tol = identity.bound_for(tiny, ref, "bfloat16")
    assert tol.reference_noise == noise and f"over {positions} positions" in tol.basis
    fixed = identity.tolerance_for(tiny.n_layers, "bfloat16")
    assert tol.at(0.01) == max(noise, fixed.at(0.01)) and tol.at(1e4) == fixed.at(1e4)  # the larger of the two
    assert identity.bound_for(tiny, ref, "float32").at(3.0) == 1e-4
    assert identity.bound_for(tiny, ref, "bfloat16", given=0.3).at(3.0) == 0.3


def test_a_vanilla_token_within_transformers_own_rounding_is_a_near_tie():
    """Question 482 of the narrow-linear table: vanilla's token 0.219 below the reference's top at a top
    logit of 3.24, where the ulp model allows 0.086 but transformers' own bfloat16 forward shifts gaps
    by up to ~0.6; a method token 2 logits down stays a bug under either."""
    fixed = identity.tolerance_for(30, "bfloat16")
    measured = identity.Tolerance(fixed.absolute, fixed.ulps, "bfloat16", reference_noise=0.6)
    assert fixed.at(3.24) < 0.219 <= measured.at(3.24)
    assert measured.at(3.24) < 2.0 and str(measured) == f"max(0.05, {fixed.ulps:g} ulp, 0.6)"
    # judged so, the line and the counts say which term certified it
    where = dict(question_id=482, subtask="rag", turn=1, position=39)
    d = identity.Divergence(**where, vanilla_token=9308, method_token=26627, vanilla_gap=0.219, method_gap=0.0,
                            tolerance=measured.at(3.24), kind="near-tie", fixed_tolerance=fixed.at(3.24))
    within = identity.Divergence(**where, vanilla_token=9308, method_token=26627, vanilla_gap=0.05, method_gap=0.0,
                                 tolerance=measured.at(3.24), kind="near-tie", fixed_tolerance=fixed.at(3.24))
    assert d.rounding_only and not within.rounding_only and not d.vanilla_only
    assert "by transformers' own rounding: the ulp model's bound is 0.0856" in identity.divergence_line(d)
    res = identity.IdentityResult(measured, divergences=[d, within])
    assert res.passed and res.as_dict()["near_tie_rounding_only"] == 1
    assert identity.aside(res.rounding_only, identity.ROUNDING_ONLY) == " (1 only by transformers' own rounding)"
    assert identity.aside(0, identity.ROUNDING_ONLY) == ""


def test_whole_turns_are_compared_with_a_resync_at_each_divergence():
    """A method that swaps one token (and agrees again once given vanilla's token there): a near-tie
    when the reference's margin there is under the bound, a bug otherwise; either way every later
    token of the turn is still compared."""
    tiny = TargetModel.tiny("llama", vocab_size=16, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, seed=0)
    tiny.chat_ids = lambda messages: [1, 2, 3]
    reg = build_registry()
    vanilla = build_method(reg, "vanilla", [], tiny, 0.0)
    n = 8
    v = tiny.greedy_continuation([1, 2, 3], n)
    ref = identity.Reference(tiny)
    logits = ref.logits([1, 2, 3] + v[:2])
    top2 = int(logits.topk(2).indices[1])
    margin = float(logits.max() - logits[top2])

    def swapping(token):
        def generate(ids, s, seed, on_round=None):
            seq = v[:2] + [token] + v[3:] if len(ids) == 3 else v  # forced past the swap: vanilla's own
            k = len(ids) - 3
            return SimpleNamespace(token_ids=seq[k:k + s.max_new_tokens])
        return SimpleNamespace(generate=generate)

    q = [Question("q1", "qa", "qa", ("hello", "again"))]
    quiet = lambda *_: None  # noqa: E731
    tie = identity.greedy_check(tiny, swapping(top2), vanilla, q, n, identity.Tolerance(1.5 * margin), quiet, ref)
    assert tie.passed and tie.turns == 2 and len(tie.divergences) == 2  # once per turn: later turns are compared
    d = tie.divergences[0]
    assert (d.position, d.vanilla_token, d.method_token, d.kind) == (2, v[2], top2, "near-tie")
    assert d.method_gap == pytest.approx(margin) and d.vanilla_gap == pytest.approx(0.0, abs=1e-6)
    assert tie.tokens_compared == 2 * n  # every token of both turns
    bug = identity.greedy_check(tiny, swapping(top2), vanilla, q, n, identity.Tolerance(margin / 2), quiet, ref)
    assert not bug.passed and bug.uncertified == 2 and bug.tokens_compared == 2 * n
    # there the method's token is the one off the reference's top
    assert bug.vanilla_only == 0 and "only vanilla" not in identity.divergence_line(bug.divergences[0])
    same = identity.greedy_check(tiny, vanilla, vanilla, q, n, identity.Tolerance(1e-4), quiet, ref)
    assert same.passed and same.identical_turns == 2 and same.divergences == [] and same.tokens_compared == 2 * n


def test_a_bug_where_only_vanilla_is_past_the_bound_stays_a_bug_and_says_so():
    """The verdict does not change (both tokens must be within the bound), but the line names the side
    the reference disagrees with: a method whose token is the reference's top is not what broke."""
    where = dict(question_id=321, subtask="qa", turn=0, position=38)
    d = identity.Divergence(**where, vanilla_token=678, method_token=14937, vanilla_gap=0.0565, method_gap=0.0,
                            tolerance=0.05, kind="bug", top_token=14937)
    assert d.vanilla_only and identity.divergence_line(d).endswith("-> BUG (only vanilla's token is past the bound)")
    res = identity.IdentityResult(identity.Tolerance(0.05), divergences=[d])
    assert not res.passed and res.as_dict()["bug_vanilla_only"] == 1
    both = identity.Divergence(**where, vanilla_token=678, method_token=9, vanilla_gap=0.0565, method_gap=0.2,
                               tolerance=0.05, kind="bug", top_token=14937)
    assert not both.vanilla_only and "only vanilla" not in identity.divergence_line(both)


def test_a_broken_wide_path_is_certified_by_the_old_rule_and_caught_by_the_reference(kernel_path, monkeypatch):
    """The mutant scales the narrow kernel's output wherever a forward holds more than one position
    (a verification), so vanilla's one-position steps are untouched and every speculative round is
    wrong. The self-calibrated rule measures that very error as "kernel noise" and certifies what
    it causes; the float32 reference and its bound (transformers' rounding included) call it a bug."""
    kernel_path("avx512-bf16")
    from specharness.model.accel import narrow_attention
    tiny = TargetModel.tiny("llama", vocab_size=64, n_layers=2, hidden_size=128, n_heads=2, n_kv_heads=1, seed=3,
                            dtype="bfloat16")
    assert tiny.attention.narrow, "the test needs the narrow kernel serving this model"
    tiny.chat_ids = lambda messages: [5, 6, 7, 8]
    real = narrow_attention.narrow_attention
    monkeypatch.setattr(narrow_attention, "narrow_attention",
                        lambda rows, k, v, bias, kind="avx512-bf16": real(rows, k, v, bias, kind) * (
                            1.5 if bias.shape[0] > 1 else 1.0))
    reg = build_registry([PLUGIN])
    method = build_method(reg, "random-draft", ["gamma=2"], tiny, 0.0)
    vanilla = build_method(reg, "vanilla", [], tiny, 0.0)
    old = identity.self_calibrated_tolerance(tiny, "bfloat16")
    new = identity.bound_for(tiny, identity.Reference(tiny), "bfloat16")  # transformers' rounding included
    assert old.ulps > new.ulps  # the mutant inflated what the old rule measured
    assert new.reference_noise > new.absolute  # the measured term is live here, and still catches it
    r = identity.greedy_check(tiny, method, vanilla, [Question("q", "qa", "qa", ("x",))], 12, new, lambda *_: None,
                              legacy=old)
    assert r.divergences, "the mutant changed no token: the test would prove nothing"
    caught = [d for d in r.divergences if d.legacy_kind == "near-tie" and d.kind == "bug"]
    assert caught, [(d.legacy_kind, d.kind, d.method_gap) for d in r.divergences]
    assert not r.passed


def test_certify_judges_each_file_against_its_vanilla_and_names_what_it_cannot_certify(tmp_path, capsys):
    """`lossless --certify` over a benchmark folder: a float32 pld file identical to vanilla passes;
    the same file with one token swapped for one the reference ranks far below is a bug, named in
    the log with its question and position, counted in identity_certified.json, and the command fails."""
    from specharness.cli import main
    from specharness.results import read_results
    out = tmp_path / "cmp"
    quick = ["--subtasks", "qa", "--limit", "1", "--max-new-tokens", "8", "--warmup", "0", "--repeats", "1"]
    assert main(["compare", "--methods", "vanilla,pld", "--out-dir", str(out), *quick]) == 0
    assert main(["lossless", "--certify", str(out)]) == 0
    assert "0 uncertified" in capsys.readouterr().out
    pld = next(out.glob("pld-*.jsonl"))
    record = json.loads(pld.read_text().splitlines()[0])
    ids = record["choices"][0]["token_ids"][0]
    _, [vanilla] = read_results(next(out.glob("vanilla-*.jsonl")))
    assert ids == vanilla.token_ids[0] and len(ids) > 3
    ids[2] = (ids[2] + 1) % 1000 + 7  # any other token: the reference ranks the greedy one first by more than 1e-4
    pld.write_text(json.dumps(record) + "\n")
    assert main(["lossless", "--certify", str(out)]) == 1
    log = capsys.readouterr().out
    assert "1 uncertified" in log and f"turn 1 position 2: vanilla {vanilla.token_ids[0][2]}" in log and "BUG" in log
    certified = json.loads((out / "identity_certified.json").read_text())["pld"]
    assert certified["file"] == pld.name  # how the report finds it, whatever the labels become
    [bug] = certified["mismatches"]
    assert (bug["position"], bug["method_token"], bug["kind"]) == (2, ids[2], "bug") and bug["method_gap"] > 1e-4

    # without vanilla beside it nothing can be certified: one line saying so, not "0 file(s) -> PASS"
    lone = tmp_path / "lone"
    lone.mkdir()
    for f in out.glob("pld-*"):
        (lone / f.name).write_bytes(f.read_bytes())
    capsys.readouterr()
    assert main(["lossless", "--certify", str(lone)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nothing to certify" in err and "1 greedy without a vanilla file beside it" in err and "\n" not in err
    assert not (lone / "identity_certified.json").exists()
