"""The losslessness suite passes correct methods and fails a deliberately broken verifier."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from specharness import distributions, lossless
from specharness.plugins import build_registry
from specharness.runner import build_method
from specharness.model import TargetModel

PLUGIN = str(Path(__file__).parent / "fixtures" / "lossless_plugins.py")


def run_cli(argv, tmp_path):
    from specharness.cli import main
    out = tmp_path / "lossless.json"
    rc = main(["lossless", *argv, "--json", str(out), "--quiet"])
    return rc, json.loads(out.read_text())


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run thousands of small forwards: one thread is several times faster on a
    shared 2-core machine than two."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=8, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, seed=0)


# ---- the statistics underneath -------------------------------------------------------------------------
def test_pooling_keeps_every_expected_count_at_least_five():
    probs = {i: p for i, p in enumerate(np.r_[0.5, 0.3, np.full(40, 0.2 / 40)])}
    groups = distributions.pool_cells(probs, 100)
    assert sorted(k for g in groups for k in g) == list(range(42))
    assert all(100 * sum(probs[k] for k in g) >= 5 for g in groups)
    assert len(groups) == 3  # 0.5, 0.3 alone, the 40 small cells pooled (expected 20)


def test_chi_square_accepts_the_true_distribution_and_rejects_another():
    rng = np.random.default_rng(0)
    p = np.array([0.4, 0.3, 0.2, 0.05, 0.03, 0.02])
    probs = dict(enumerate(p))
    good = Counter(rng.choice(6, 3000, p=p).tolist())
    assert distributions.chi_square(good, probs).p_value > 0.01
    bad = Counter(rng.choice(6, 3000, p=[0.35, 0.35, 0.2, 0.05, 0.03, 0.02]).tolist())
    assert distributions.chi_square(bad, probs).p_value < 1e-4
    # an observed key the exact distribution does not list lands in the tail cell
    tail = distributions.chi_square(Counter({0: 50, 1: 50, "x": 900}), {0: 0.5, 1: 0.5}, other="other")
    assert tail.p_value < 1e-6


def test_power_and_sample_size():
    assert distributions.power(1000, 10, 0.1, 0.01) < distributions.power(3000, 10, 0.1, 0.01)
    probs = {i: 1 / 20 for i in range(20)}
    n, df, pw = distributions.samples_for_power(probs, 0.1, 0.01)
    assert df == 19 and pw >= 0.9
    assert distributions.power(int(n * 0.8), 19, 0.1, 0.01) < 0.9


def test_exact_distribution_is_a_distribution_built_from_conditionals(tiny):
    ex = distributions.exact_sequence_distribution(tiny, [1, 2, 3], 2, 1.3)
    assert len(ex) == 64 and sum(ex.values()) == pytest.approx(1.0)
    p1 = distributions.next_token_probs(tiny, [1, 2, 3], 1.3)
    p2 = distributions.next_token_probs(tiny, [1, 2, 3, 5], 1.3)
    assert ex[(5, 7)] == pytest.approx(p1[5] * p2[7])


# ---- sampling level (a) and (b) -----------------------------------------------------------------------
def _method(tiny, name, verifier, temperature=1.3):
    return build_method(build_registry([PLUGIN]), name, [], tiny, temperature, verifier)


def test_level_a_passes_correct_methods_and_fails_always_accept(tiny):
    common = dict(target=tiny, prompt=[1, 2, 3, 4, 5], k=3, temperature=1.3, n=None, w=0.25, alpha=0.01, seed=11)
    ok = lossless.level_a(_method(tiny, "random-draft", "speculative-sampling"), **common)
    assert ok["passed"], ok["test"]
    assert ok["power"] >= 0.9 and ok["seeds"] == f"numpy SeedSequence(11).generate_state({ok['samples']}) >> 1"
    e = ok["exercised"]  # both the accept path and the reject (residual) path were taken
    assert e["drafted"] >= ok["samples"] and 0 < e["accepted"] < e["drafted"]
    bad = lossless.level_a(_method(tiny, "random-draft", "always-accept"), **common)
    assert not bad["passed"] and bad["test"]["p_value"] < 1e-6
    assert bad["samples"] == ok["samples"]


def test_level_b_passes_the_correct_verifier_and_fails_always_accept():
    t = TargetModel.tiny("llama", vocab_size=64, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, seed=1)
    common = dict(target=t, prompt=[1, 2, 3], temperature=1.0, n=None, w=0.3, alpha=0.01, seed=5)
    ok = lossless.level_b(_method(t, "random-draft", "speculative-sampling", 1.0), **common)
    assert ok["passed"], (ok["first_token"], ok["second_given_first"])
    assert ok["second_given_first"]["df"] > 0 and ok["first_token"]["df"] > 0
    bad = lossless.level_b(_method(t, "random-draft", "always-accept", 1.0), **common)
    assert not bad["passed"] and bad["second_given_first"]["p_value"] < 1e-6


# ---- the command, greedy level on SmolLM2 included ----------------------------------------------------
def test_suite_passes_a_correct_method(tmp_path):
    rc, rep = run_cli(["--method", "random-draft", "--plugin", PLUGIN, "--levels", "greedy,a",
                       "--subtasks", "qa,math_reasoning", "--max-new-tokens", "12", "--effect-a", "0.3"], tmp_path)
    assert rc == 0 and rep["passed"]
    g = rep["levels"]["greedy"]
    assert g["turns"] == 2 and g["identical"] == 2 and g["mismatches"] == [] and g["tokens_compared"] > 12
    assert g["tolerance"]["absolute"] == 1e-4 and g["tolerance"]["ulps"] == 0  # float32: fixed, not calibrated
    assert rep["levels"]["a"]["verifier"] == "speculative-sampling"


def test_suite_fails_the_broken_verifier(tmp_path, capsys):
    rc, rep = run_cli(["--method", "random-draft", "--plugin", PLUGIN, "--levels", "greedy,a",
                       "--subtasks", "qa", "--max-new-tokens", "12", "--effect-a", "0.3",
                       "--verifier", "always-accept-greedy,always-accept"], tmp_path)
    assert rc == 1 and not rep["passed"]
    g = rep["levels"]["greedy"]
    mm = g["mismatches"]
    # resynced after each divergence: the whole turn is compared, so random drafts diverge again and again
    assert len(mm) > 1 and 10 <= g["tokens_compared"] <= 12 and all(m["kind"] == "bug" for m in mm)
    assert mm[0]["method_gap"] > 1e-4 and mm[0]["vanilla_token"] != mm[0]["method_token"]
    assert [m["position"] for m in mm] == sorted({m["position"] for m in mm})
    assert not rep["levels"]["a"]["passed"]
    out = capsys.readouterr().out
    assert "divergence: question" in out and "-> BUG" in out and "lossless random-draft: FAIL" in out


def test_a_pass_on_too_few_samples_says_its_power_is_too_low(tmp_path, capsys):
    rc, rep = run_cli(["--method", "pld", "--levels", "a", "--samples-a", "10"], tmp_path)
    assert rc == 0 and rep["levels"]["a"]["power"] < 0.9
    out = capsys.readouterr().out
    assert "note: (a) at power 0." in out and "drop --samples-X" in out and "lossless pld: PASS" in out


def test_vanilla_passes_level_a(tmp_path):
    rc, rep = run_cli(["--method", "vanilla", "--levels", "a", "--effect-a", "0.3", "--samples-a", "300"], tmp_path)
    assert rc == 0 and rep["levels"]["a"]["samples"] == 300


def test_bad_lossless_input_is_one_line(capsys):
    from specharness.cli import main
    assert main(["lossless", "--method", "vanilla", "--levels", "a,zzz"]) == 2
    assert main(["lossless", "--method", "vanilla", "--verifier", "nope", "--levels", "a"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("specharness: error:") for line in err)


def test_a_greedy_only_method_is_refused_for_sampling_before_anything_runs(capsys):
    from specharness.cli import main
    assert main(["lossless", "--method", "kangaroo-oracle", "--levels", "greedy,a"]) == 2
    assert main(["run", "--method", "kangaroo-oracle", "--temperature", "0.7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("greedy only" in line for line in err), err


def test_level_c_catches_a_verifier_broken_only_at_later_drafts(tmp_path):
    """Level (a) generates 3 tokens, so no round holds a second draft: a rule that is wrong only
    from the second draft on passes it. Level (c) generates 5 and rejects drafts at position 2+."""
    common = ["--method", "random-draft", "-o", "gamma=3", "--plugin", PLUGIN, "--levels", "a,c", "--effect-a", "0.3"]
    rc, rep = run_cli([*common, "--verifier", "late-accept"], tmp_path)
    a, c = rep["levels"]["a"], rep["levels"]["c"]
    assert rc == 1 and a["passed"] and not c["passed"] and c["k"] == 5
    assert c["test"]["p_value"] < 1e-3  # the distribution test itself catches it (it never rejects late drafts)
    rc, rep = run_cli(common, tmp_path)
    c = rep["levels"]["c"]
    assert rc == 0 and c["passed"] and c["late_exercised"]
    assert lossless.rejections_from(c["exercised"], 3) > 0  # even the third draft of a round was rejected


def test_level_c_fails_when_later_drafts_were_never_tested(tmp_path):
    rc, rep = run_cli(["--method", "random-draft", "-o", "gamma=1", "--plugin", PLUGIN, "--levels", "c",
                       "--samples-c", "200"], tmp_path)
    assert rc == 1 and not rep["levels"]["c"]["late_exercised"]


def test_level_b_caps_its_sample_size_and_says_so():
    """A random model over a large vocabulary has flat next-token distributions: the N chosen for
    power would be huge; it is capped and the capped power reported."""
    t = TargetModel.tiny("qwen2", vocab_size=4096, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, seed=1)
    r = lossless.level_b(_method(t, "vanilla", None, 1.0), t, [1, 2, 3], 1.0, None, 0.2, 0.01, 5, max_samples=300)
    assert r["capped"] and r["samples"] == 300 < r["samples_for_power"] and r["power_first_token"] < 0.9
