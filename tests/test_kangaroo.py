"""Kangaroo: lossless greedy and sampled decoding, both acceptance paths, checkpoints, bad options."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import pytest
import torch

from specharness.methods.kangaroo import adapter as ka, checkpoint as kc, drafter as kg
from specharness.methods.vanilla import NoDraft
from specharness.distributions import chi_square, exact_sequence_distribution
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.model import TargetModel
from specharness.verify import greedy, speculative_sampling

torch.set_num_threads(min(2, torch.get_num_threads()))

NEAR_TIE = 1e-4  # a float32 greedy flip is accepted only where the target's top-2 logits are this close


# ---- helpers ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=8, n_layers=4, hidden_size=32, n_heads=4, n_kv_heads=2, seed=1)


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core machine two threads spin-wait:
    thousands of tiny generations run several times faster on one. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _rounds(gen):
    return [(r.drafted, r.accepted) for r in gen.rounds[1:]]


def _check_greedy_identical(target, prompt, ref, got, label):
    """Identical, or the first divergence is a float32 near-tie of the target (reported)."""
    if got == ref:
        return None
    j = next(i for i, (a, b) in enumerate(zip(ref, got)) if a != b) if any(
        a != b for a, b in zip(ref, got)) else min(len(ref), len(got))
    logits = target.logits(prompt + ref[:j])[-1].double()
    top2 = logits.topk(2).values
    margin = float(top2[0] - top2[1])
    assert margin < NEAR_TIE, (f"{label}: kangaroo diverged from vanilla at token {j} where the target's "
                               f"top-2 logit margin is {margin:.3g} (not a near-tie): a bug")
    warnings.warn(f"{label}: float32 near-tie at token {j} (top-2 margin {margin:.2e} < {NEAR_TIE}); "
                  "accepted as rounding, not a bug")
    return margin


# ---- greedy identity on SmolLM2 --------------------------------------------------------------------------
# ``smol`` (the embedded SmolLM2, loaded once per session) comes from tests/conftest.py


def _grid():
    """Every value of eta {0, 0.6, 0.9}, exit_layer {1, 2, 4} and gamma {1, 6} appears with every
    subtask (3 settings per subtask, rotated between subtasks), rather than the full 18-way cross
    product per subtask, to keep the test within CPU minutes."""
    from specharness.tasks.specbench import SUBTASKS
    etas, layers = (0.0, 0.6, 0.9), (1, 2, 4)
    out = []
    for i, sub in enumerate(SUBTASKS):
        for j in range(3):
            out.append((sub, etas[(i + j) % 3], layers[j], (6, 1, 6)[(i + j) % 3] if i % 2 else (1, 6, 1)[(i + j) % 3]))
    return out


def _prompt(target, subtask):
    from specharness.tasks.specbench import SAMPLE_FILE, load_questions
    qs = [q for q in load_questions(SAMPLE_FILE) if q.subtask == subtask]
    q = min(qs, key=lambda q: len(q.turns[0]))  # the shortest question keeps the prefill cheap
    return target.chat_ids([{"role": "user", "content": q.turns[0]}])


def test_greedy_identical_to_vanilla_every_subtask(smol, vanilla_greedy, identity_questions, one_thread):
    """The grid on every subtask under ``-m slow``; the default run takes two subtasks' rows of it
    (``identity_questions``), every eta, exit layer and gamma still among them."""
    grid = _grid()
    subtasks = sorted({g[0] for g in grid})
    assert len(subtasks) == 6
    for sub in subtasks:
        cover = [g for g in grid if g[0] == sub]
        assert {g[1] for g in cover} == {0.0, 0.6, 0.9} and {g[2] for g in cover} == {1, 2, 4}
        assert {g[3] for g in cover} == {1, 6}
    grid = [g for g in grid if g[0] in {q.subtask for q in identity_questions}]
    shipped = kc.shipped_adapter_dir(smol, 2).is_dir()
    prompts, refs, stats, ties = {}, {}, Counter(), []
    for sub, eta, layer, gamma in grid:
        if sub not in prompts:
            prompts[sub] = _prompt(smol, sub)
            refs[sub] = vanilla_greedy(prompts[sub], 32)
        adapter = "" if (layer == 2 and shipped) else "random"
        d = kg.build(smol, {"exit_layer": layer, "eta": eta, "gamma": gamma, "adapter": adapter})
        gen = generate(smol, d, greedy, prompts[sub], 32)
        label = f"{sub} eta={eta} gamma={gamma} l={layer} adapter={adapter or 'shipped'}"
        m = _check_greedy_identical(smol, prompts[sub], refs[sub], gen.token_ids, label)
        if m is not None:
            ties.append((label, m))
        done = 1  # tokens generated before the round (the prefill chose the first)
        for k, n in _rounds(gen):
            budget = min(gamma, 32 - done - 1)  # the engine's max_draft caps the last rounds
            assert min(1, budget) <= k <= budget and 0 <= n <= k
            if k:
                stats["all_accepted" if n == k else "rejected"] += 1
            if eta == 0.0:  # never stops early: gamma drafts unless the token budget is shorter
                assert k == budget
            done += n + 1
    assert stats["all_accepted"] > 0 and stats["rejected"] > 0, stats
    if ties:
        print("near-ties accepted:", ties)


def test_greedy_full_head_and_draft_vocab_identical(smol, vanilla_greedy, one_thread):
    if not kc.shipped_adapter_dir(smol, 2).is_dir():
        pytest.skip("no shipped adapter")
    prompt = _prompt(smol, "qa")
    ref = vanilla_greedy(prompt, 32)
    for dv in (0, 512):
        gen = generate(smol, kg.build(smol, {"draft_vocab": dv}), greedy, prompt, 32)
        _check_greedy_identical(smol, prompt, ref, gen.token_ids, f"draft_vocab={dv}")


def test_first_eta_drafts_nothing_where_the_first_draft_is_unsure_and_keeps_vanillas_tokens(smol, vanilla_greedy,
                                                                                              identity_questions,
                                                                                              one_thread):
    """``first_eta`` (not the paper's, which always proposes the first draft): a round whose first draft's
    top-1 probability is <= first_eta verifies the current token alone. At 0 every round with room drafts,
    at 1 none does, in between some do; the tokens stay vanilla's (on every subtask under ``-m slow``)."""
    if not kc.shipped_adapter_dir(smol, 2).is_dir():
        pytest.skip("no shipped adapter")
    drafting = Counter()
    for sub in sorted({q.subtask for q in identity_questions}):
        prompt = _prompt(smol, sub)
        ref = vanilla_greedy(prompt, 32)
        for first in (0.0, 0.5, 1.0):
            gen = generate(smol, kg.build(smol, {"first_eta": first}), greedy, prompt, 32)
            _check_greedy_identical(smol, prompt, ref, gen.token_ids, f"{sub} first_eta={first}")
            rounds = [k for k, _ in _rounds(gen)][:-2]  # the last rounds may have no room (max_draft)
            drafting[first, "drafted"] += sum(k > 0 for k in rounds)
            drafting[first, "rounds"] += len(rounds)
    share = {first: drafting[first, "drafted"] / drafting[first, "rounds"] for first in (0.0, 0.5, 1.0)}
    assert share[0.0] == 1.0 and share[1.0] == 0.0 and 0.0 < share[0.5] < 1.0, share


# ---- sampling is lossless (tiny model, exact distributions) --------------------------------------------
def _sample_many(target, make_drafter, prompt, n_new, temperature, n):
    seen, paths = Counter(), Counter()
    for seed in range(n):
        gen = generate(target, make_drafter(), speculative_sampling, prompt, n_new, temperature=temperature, seed=seed)
        seen[tuple(gen.token_ids)] += 1
        for k, a in _rounds(gen):
            if k:
                paths["all_accepted" if a == k else "rejected"] += 1
            else:
                paths["no_draft"] += 1
    return seen, paths


def test_sampling_lossless_first_tokens(tiny, one_thread):
    """Tokens 2-3 (token 1 comes from the prefill) pass through a draft that is accepted (then
    token 3 is the bonus) or rejected (token 2 resampled from the residual, token 3 drafted on the
    drafter's cropped cache with no room: a zero-draft round). Their joint must match the target's."""
    prompt, T, n = [1, 2, 3], 1.0, 4000
    exact = exact_sequence_distribution(tiny, prompt, 3, T)
    joint = Counter()
    for seq, p in exact.items():
        joint[seq[1:]] += p
    make = lambda: kg.build(tiny, {"exit_layer": 1, "eta": 0.0, "gamma": 4, "adapter": "random:3"})  # noqa: E731
    seen, paths = _sample_many(tiny, make, prompt, 3, T, n)
    assert paths["all_accepted"] > 200 and paths["rejected"] > 200, paths
    observed = Counter()
    for seq, c in seen.items():
        observed[seq[1:]] += c
    pval = chi_square(observed, dict(joint)).p_value
    assert pval > 1e-3, f"sampled tokens 2-3 do not follow the target (chi-square p = {pval:.2e}, {paths})"


def test_sampling_lossless_multi_draft_and_draft_vocab(tiny, one_thread):
    """gamma = 2 with a draft head restricted to 5 of 8 tokens (q = 0 elsewhere): the 4th token's
    marginal covers rounds that accept everything (the last draft's adapter K/V, written in its
    round, is kept) and rounds that reject; it must match the target's exact marginal."""
    prompt, T, n = [4, 1], 0.8, 3000
    exact = exact_sequence_distribution(tiny, prompt, 4, T)
    marg = Counter()
    for seq, p in exact.items():
        marg[seq[3:]] += p
    rows = torch.tensor([0, 2, 3, 5, 7])
    adapter = ka.Adapter.for_target(tiny, seed=5).eval()
    drafter = kg.KangarooDrafter(tiny, adapter, 2, 0.0, 2, rows)  # state is per sequence (begin): one serves all
    make = lambda: drafter  # noqa: E731
    seen, paths = _sample_many(tiny, make, prompt, 4, T, n)
    assert paths["all_accepted"] > 100 and paths["rejected"] > 100, paths
    observed = Counter()
    for seq, c in seen.items():
        observed[seq[3:]] += c
    pval = chi_square(observed, dict(marg)).p_value
    assert pval > 1e-3, f"4th sampled token does not follow the target (chi-square p = {pval:.2e}, {paths})"


def test_sampling_lossless_where_first_eta_leaves_rounds_undrafted(tiny, one_thread):
    """With first_eta, a round proposes its first draft or nothing, by the draft's own confidence (q at
    the decoding temperature): tokens 2-3 over rounds of both kinds must still follow the target's joint."""
    prompt, T, n = [1, 2, 3], 1.0, 4000
    exact = exact_sequence_distribution(tiny, prompt, 3, T)
    joint = Counter()
    for seq, p in exact.items():
        joint[seq[1:]] += p
    make = lambda: kg.build(tiny, {"exit_layer": 1, "eta": 0.0, "gamma": 4, "adapter": "random:3",  # noqa: E731
                                   "first_eta": 0.4})  # splits this adapter's first drafts: ~40% proposed
    seen, paths, first = Counter(), Counter(), Counter()
    for seed in range(n):
        gen = generate(tiny, make(), speculative_sampling, prompt, 3, temperature=T, seed=seed)
        seen[tuple(gen.token_ids[1:])] += 1
        first["drafted" if gen.rounds[1].drafted else "undrafted"] += 1  # the first round always has room
    assert first["drafted"] > 300 and first["undrafted"] > 300, first
    pval = chi_square(seen, dict(joint)).p_value
    assert pval > 1e-3, f"sampled tokens 2-3 do not follow the target (chi-square p = {pval:.2e}, {first})"


def test_sampling_q_zero_outside_draft_vocab(tiny):
    rows = torch.tensor([1, 6])
    d = kg.KangarooDrafter(tiny, ka.Adapter.for_target(tiny).eval(), 2, 0.0, 3, rows)
    from specharness.api import DecodeState
    with torch.inference_mode():
        cache = tiny.new_cache(32)
        prompt = [1, 2, 3]
        h = tiny.layers(tiny.embed(torch.tensor(prompt)), 0, 0, 2, cache)
        tiny.layers(h, 0, 2, 4, cache)
        st = DecodeState(tiny, cache, prompt + [5], 3, 10, 1.0, torch.Generator().manual_seed(0))
        d.begin(st, h)
        prop = d.propose(st)
    assert prop.q.shape == (len(prop.tokens), tiny.vocab_size)
    outside = torch.ones(tiny.vocab_size, dtype=torch.bool)
    outside[rows] = False
    assert float(prop.q[:, outside].abs().max()) == 0.0
    assert torch.allclose(prop.q.sum(-1), torch.ones(len(prop.tokens)), atol=1e-5)
    assert all(t in (1, 6) for t in prop.tokens)
    assert prop.hidden.shape == (len(prop.tokens) + 1, tiny.hidden_size) and prop.layer == 2


# ---- a draft token is one stack call; the drafter's cache is the target's and the adapter's own K/V -------------
@pytest.mark.parametrize("variant", ["published", "ffn", "own-head", "draft-vocab", "qwen2"])
def test_a_draft_token_is_one_stack_call_and_the_drafters_cache_holds_what_the_layers_compute(tiny, variant):
    """Each round calls the drafter's one stack (shallow layers + adapter + head) once for the current
    token and once per draft, and nothing else; after a generation, the drafter's cache holds at every
    kept position the K/V the target's own layers [0, l) compute over the whole sequence at once, and
    the adapter's K/V of their layer-l states (checked by a separate adapter pass); the output is
    vanilla's. For each adapter layout, and on a Qwen2 target (q/k/v biases in its layers, none in the
    adapter's: one stack holds both)."""
    l = 2
    target = TargetModel.tiny("qwen2", vocab_size=8, n_layers=4, hidden_size=32, n_heads=4, n_kv_heads=2,
                              seed=1) if variant == "qwen2" else tiny
    rows = torch.tensor([1, 2, 4, 6, 7])
    adapter = ka.Adapter.for_target(target, seed=4, std=0.3, ffn=variant == "ffn",
                                    head_rows=rows if variant == "own-head" else None).eval()
    d = kg.KangarooDrafter(target, adapter, l, 0.0, 3, rows if variant == "draft-vocab" else None)  # eta 0: full budget
    calls = []
    forward = target.forward
    target.forward = lambda *a, **k: calls.append(k.get("stack", "")) or forward(*a, **k)
    try:
        gen = generate(target, d, greedy, [1, 2, 3, 4], 12)
    finally:
        del target.forward
    assert gen.token_ids == generate(target, NoDraft(), greedy, [1, 2, 3, 4], 12).token_ids
    drafted = [r.drafted for r in gen.rounds[1:]]
    assert sum(drafted) > len(drafted)  # rounds of more than one draft
    assert sum(c == d.stack for c in calls) == sum(k + 1 for k in drafted) + 1  # + the prompt's adapter pass
    assert sum(c == "" for c in calls) == 1 + len(drafted)  # the prefill and one verification a round
    seq = [1, 2, 3, 4] + gen.token_ids
    n = d.cache.lengths[0]
    assert n == len(seq) - 1 and d.cache.lengths == [n] * (l + 1)  # every position but the new current token
    with torch.inference_mode():
        ref = target.new_cache(32)
        h = target.forward(torch.tensor(seq[:n]), ref, 0, 0, l).hidden
        ref_adapter = target.new_cache(32, n_layers=1)
        adapter(target, h, ref_adapter, 0)
    torch.testing.assert_close(d.cache.keys[:l, :, :n], ref.keys[:l, :, :n], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d.cache.values[:l, :, :n], ref.values[:l, :, :n], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d.cache.keys[l, :, :n], ref_adapter.keys[0, :, :n], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d.cache.values[l, :, :n], ref_adapter.values[0, :, :n], rtol=1e-4, atol=1e-5)


# ---- the adapter's cache is consistent ------------------------------------------------------------------
def test_adapter_one_pass_equals_step_by_step(tiny):
    a = ka.Adapter.for_target(tiny, seed=2, std=0.3).eval()
    x = torch.randn(6, tiny.hidden_size)
    with torch.no_grad():
        full = a(tiny, x, tiny.new_cache(8, n_layers=1), 0)
        c = tiny.new_cache(8, n_layers=1)
        parts = [a(tiny, x[:3], c, 0)] + [a(tiny, x[i:i + 1], c, i) for i in range(3, 6)]
    assert torch.allclose(full, torch.cat(parts), atol=1e-5)


# ---- checkpoints in the authors' layout ------------------------------------------------------------------
def _authors_config(target, **over):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": target.hidden_size,
           "num_attention_heads": target.n_heads, "num_key_value_heads": target.n_kv_heads,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "vocab_size": target.vocab_size,
           "intermediate_size": 64, "max_position_embeddings": 2048, "torch_dtype": "float16"}
    cfg.update(over)
    return cfg


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
def test_authors_layout_checkpoint_loads_and_runs(tiny, tmp_path, fmt):
    H, d = tiny.hidden_size, tiny.head_dim
    g = torch.Generator().manual_seed(0)
    state = {
        "layers.0.self_attn.q_proj.weight": torch.randn(tiny.n_heads * d, H, generator=g) * 0.1,
        "layers.0.self_attn.k_proj.weight": torch.randn(tiny.n_kv_heads * d, H, generator=g) * 0.1,
        "layers.0.self_attn.v_proj.weight": torch.randn(tiny.n_kv_heads * d, H, generator=g) * 0.1,
        "layers.0.self_attn.o_proj.weight": torch.randn(H, tiny.n_heads * d, generator=g) * 0.1,
        "layers.0.input_layernorm.weight": torch.ones(H) * 1.1,
        "norm.weight": torch.ones(H) * 0.9,
    }
    if fmt == "bin":
        torch.save(state, tmp_path / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file
        save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(_authors_config(tiny)))
    d_ = kg.build(tiny, {"adapter": str(tmp_path), "exit_layer": 2, "eta": 0.0, "gamma": 3})
    assert torch.equal(d_.adapter.norm.weight, state["norm.weight"])
    ref = generate(tiny, NoDraft(), greedy, [1, 2, 3], 12).token_ids
    gen = generate(tiny, d_, greedy, [1, 2, 3], 12)
    assert gen.token_ids == ref
    assert any(k > 0 for k, _ in _rounds(gen))


def test_unsafe_pickle_is_refused(tiny, tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(tmp_path / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"x": Evil()}, fh)
    (tmp_path / "config.json").write_text(json.dumps(_authors_config(tiny)))
    with pytest.raises(UsageError):
        kg.build(tiny, {"adapter": str(tmp_path), "exit_layer": 2})


# ---- bad options give one-line UsageErrors ---------------------------------------------------------------
def _own_checkpoint(target, tmp_path, layer):
    a = ka.Adapter.for_target(target)
    kc.save_adapter(a, tmp_path, kc.adapter_config(target, layer, 0), None)
    return str(tmp_path)


@pytest.mark.parametrize("opts, needle", [
    ({"adapter": "random", "eta": 1.5}, "eta"), ({"adapter": "random", "eta": -0.1}, "eta"),
    ({"adapter": "random", "gamma": 0}, "gamma"), ({"adapter": "random", "exit_layer": 0}, "exit_layer"),
    ({"adapter": "random", "exit_layer": 4}, "exit_layer"),
    ({"exit_layer": 3}, "train"),  # no shipped adapter for a tiny model: say how to train one
    ({"adapter": "/nonexistent/adapter"}, "does not exist"),
    ({"adapter": "random:x"}, "random"),
    ({"adapter": "random", "draft_vocab": 4}, "draft_vocab"),
    ({"adapter": "random", "colour": 1}, "colour"),
])
def test_bad_options(tiny, opts, needle):
    with pytest.raises(UsageError) as e:
        kg.build(tiny, opts)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_adapter_for_other_layer_or_model(tiny, tmp_path):
    path = _own_checkpoint(tiny, tmp_path / "a", 2)
    with pytest.raises(UsageError, match="exit_layer 2"):
        kg.build(tiny, {"adapter": path, "exit_layer": 1})
    other = TargetModel.tiny("llama", vocab_size=8, n_layers=4, hidden_size=64, n_heads=4, n_kv_heads=2)
    with pytest.raises(UsageError, match="another model") as e:
        kg.build(other, {"adapter": path, "exit_layer": 2})
    assert "\n" not in str(e.value)
    qwen = TargetModel.tiny("qwen2", vocab_size=8, n_layers=4, hidden_size=32, n_heads=4, n_kv_heads=2)
    with pytest.raises(UsageError, match="trained for"):  # same shapes, another model
        kg.build(qwen, {"adapter": path, "exit_layer": 2})
    assert kg.build(tiny, {"adapter": path, "exit_layer": 2}).exit_layer == 2


def test_plugin_registered():
    from specharness.plugins import build_registry
    reg = build_registry()
    assert "kangaroo" in reg.drafters and "kangaroo" in reg.trainers
    names = {o.name for o in reg.drafters["kangaroo"].options}
    assert names == {"exit_layer", "eta", "first_eta", "gamma", "adapter", "draft_vocab", "budget"}  # budget: the engine's


def test_trainer_bad_options(tiny, tmp_path):
    from specharness.methods.kangaroo import train as kt
    from specharness.options import resolve_options
    opts = resolve_options("kangaroo", kt.OPTIONS, {"exit_layer": 9})
    with pytest.raises(UsageError, match="exit_layer"):
        kt.run(tiny, opts, tmp_path, False)
    opts = resolve_options("kangaroo", kt.OPTIONS, {"exit_layer": 2})
    with pytest.raises(UsageError, match="draft_vocab"):  # 4096 rows of an 8-token vocabulary
        kt.run(tiny, opts, tmp_path, False)
    opts = resolve_options("kangaroo", kt.OPTIONS, {"exit_layer": 2, "draft_vocab": 0})
    with pytest.raises(UsageError, match="resume"):
        kt.run(tiny, opts, tmp_path, True)
    with pytest.raises(UsageError):
        resolve_options("kangaroo", kt.OPTIONS, {"held_out": 0.9})


def test_held_out_agreement_on_its_own_prefix_counts_the_position_after_each_hit(monkeypatch):
    """Positions 0, 1, 2 and 4 are trained; drafts hit at 0, 1 and 4. After a hit whose next position
    is trained (0 -> 1, 1 -> 2) the next draft hits once in two; 4 has no trained successor."""
    from specharness.methods.kangaroo import train as kt
    top1 = torch.tensor([5, 6, 7, 8])
    drafted = torch.tensor([5, 6, 0, 8])
    monkeypatch.setattr(kt, "_step_outputs", lambda t, a, x, sel, subset: torch.nn.functional.one_hot(drafted, 10).float())
    batch = (torch.zeros(5, 2), torch.tensor([0, 1, 2, 4]), top1[:, None], torch.ones(4, 1), top1)
    got = kt._evaluate(None, None, lambda i: batch, [0], None, None)
    assert got["top1_agreement"] == 0.75 and got["positions"] == 4
    assert got["top1_own_prefix"] == 0.5
