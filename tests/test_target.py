"""The lean forward must reproduce transformers, and the cache must cut back exactly."""

from __future__ import annotations

import pytest
import torch

from specharness.model.accel import narrow_attention
from specharness.model import Attention, TargetModel, attention_mask
from specharness.tree import Tree


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_lean_forward_matches_transformers(family):
    target = TargetModel.tiny(family, vocab_size=97, n_layers=3, hidden_size=64, n_heads=4, n_kv_heads=2, seed=1)
    ids = torch.randint(0, 97, (23,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = target.hf(ids[None]).logits[0]
    ours = target.logits(ids)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("narrow", ["", "avx512-bf16", "amx"], ids=["sdpa", "narrow", "narrow-amx"])
def test_attention_over_a_bfloat16_cache_matches_the_float32_kernels(compiled, narrow, kernel_path):
    """A bfloat16 cache takes other kernels (SDPA's flash kernel, or our narrow kernel's paths; the
    fused loop at one position, when compiled) than a float32 one (two bmm). On the same
    bfloat16-rounded inputs, under a tree mask and grouped-query heads, both give one answer: a
    mixed-up head group, a dropped mask or a misplaced slot would not. The 20-node tree gives the
    AMX path 60 rows, more than three of its 16-row tiles."""
    narrow = kernel_path(narrow)
    H, Hkv, d, n0 = 6, 2, 64 if narrow else 16, 9
    g = torch.Generator().manual_seed(4)
    rnd = lambda *shape: torch.randn(*shape, generator=g).bfloat16()  # noqa: E731
    kernel = Attention(narrow)
    fn = torch.compile(kernel.__call__, fullgraph=True) if compiled else kernel
    torch._dynamo.reset()  # one compiled kernel per (kernel, tree, dtype) in this worker: past dynamo's recompile limit
    for tree in (Tree.chain(0), Tree((-1, 0, 0, 1, 2)), Tree((-1, 0, 0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))):
        T = len(tree)
        past_k, past_v, q, k, v = rnd(Hkv, n0, d), rnd(Hkv, n0, d), rnd(H, T, d), rnd(Hkv, T, d), rnd(Hkv, T, d)
        mask = attention_mask(n0, tree, T, "cpu")
        slots = torch.arange(n0, n0 + T)
        out = {}
        for dtype in (torch.bfloat16, torch.float32):
            k_all, v_all = torch.zeros(1, Hkv, 48, d, dtype=dtype), torch.zeros(1, Hkv, 48, d, dtype=dtype)
            kc, vc = k_all[0], v_all[0]  # a one-layer cache
            kc[:, :n0], vc[:, :n0] = past_k, past_v
            out[dtype] = fn(q.to(dtype), k.to(dtype), v.to(dtype), k_all, v_all, 0, slots, mask).float()
            assert torch.equal(kc[:, n0:n0 + T].float(), k.float()) and not kc[:, n0 + T:].any()
        assert out[torch.bfloat16].shape == (T, H * d)
        torch.testing.assert_close(out[torch.bfloat16], out[torch.float32], rtol=0, atol=3e-2)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("amx", [False, True], ids=["avx512-bf16", "amx"])
def test_narrow_attention_kernel_matches_float64_attention(head_dim, amx, kernel_path):
    """The C++ kernel's two paths against attention in float64 on the same bfloat16 inputs, over
    shapes that hit their edges: slots not a multiple of 16 or 32 (and past the FMA path's 96-slot
    blocks), rows not a multiple of its 4-row blocks or of AMX's 16-row tiles, one to 64 positions
    with their own mask rows (one row seeing only the last slot), one to four query heads per key
    head, caches longer than the slots read (NaN past them), and 1 or 2 threads (units split a
    head's slots). The
    FMA path keeps its probabilities in float32: 1e-5. The AMX path rounds them to bfloat16, each
    by at most 2^-9 of itself, so a row's output may move by 2^-9 of the largest |value| it reads."""
    kernel_path("amx" if amx else "avx512-bf16")
    g = torch.Generator().manual_seed(11)
    threads = torch.get_num_threads()
    try:
        for Hkv, grp, T, n, thr in ((3, 3, 8, 288, 2), (2, 1, 1, 5, 1), (1, 4, 3, 17, 2), (3, 3, 5, 101, 2),
                                    (2, 2, 7, 250, 1), (3, 1, 2, 16, 2), (3, 3, 32, 301, 2), (1, 2, 64, 95, 1),
                                    (2, 1, 33, 47, 2)):
            torch.set_num_threads(thr)
            q = torch.randn(Hkv, grp * T, head_dim, generator=g).bfloat16()
            kc, vc = (torch.randn(Hkv, n + 13, head_dim, generator=g).bfloat16() for _ in range(2))
            kc[:, n:], vc[:, n:] = float("nan"), float("nan")  # slots past n may hold anything: never read
            allowed = torch.rand(T, n, generator=g) < 0.7
            allowed[:, 0] = True  # every row sees something
            allowed[-1] = False
            allowed[-1, -1] = True  # a padding row sees only its own slot: earlier chunks of slots add nothing
            bias = torch.zeros(T, n).masked_fill(~allowed, float("-inf"))
            got = torch.ops.specharness.narrow_attention(q, kc, vc, bias.bfloat16(), head_dim ** -0.5, amx)
            scores = q.double() @ kc[:, :n].double().transpose(1, 2) * head_dim ** -0.5
            want = torch.softmax(scores + bias.double().repeat(grp, 1), dim=-1) @ vc[:, :n].double()
            assert got.dtype == torch.float32 and got.shape == q.shape
            atol = 2 ** -9 * vc[:, :n].abs().max().item() + 1e-5 if amx else 1e-5
            torch.testing.assert_close(got.double(), want, rtol=0, atol=atol, msg=f"{(Hkv, grp, T, n, thr)}")
            assert torch.equal(got[:, T - 1::T], vc[:, n - 1:n].float().expand(Hkv, grp, head_dim)), "the row seeing one slot"
    finally:
        torch.set_num_threads(threads)


def test_incremental_blocks_match_one_pass():
    """Prefill, then blocks of 1 and 3 tokens from a cache: same logits as one full pass."""
    target = TargetModel.tiny("qwen2", vocab_size=50, n_layers=2, seed=2)
    ids = list(range(3, 20))
    full = target.logits(ids)
    cache = target.new_cache(len(ids))
    parts = [target.logits(ids[:10], cache, 0), target.logits(ids[10:11], cache, 10),
             target.logits(ids[11:14], cache, 11), target.logits(ids[14:], cache, 14)]
    torch.testing.assert_close(torch.cat(parts), full, rtol=1e-5, atol=1e-5)


def test_prefill_captures_the_exit_layer_states_of_a_split_prefill():
    """The engine prefills every method in one full forward and hands an exit-layer drafter the
    states entering its layer as a capture: they, the cache and the logits equal a prefill split at
    that layer (how drafters got them before)."""
    target = TargetModel.tiny("llama", vocab_size=40, n_layers=4, seed=5)
    ids = torch.tensor([5, 9, 1, 30, 7, 2])
    one, split = target.new_cache(16), target.new_cache(16)
    out = target.forward(ids, one, 0, head=True, capture=(1,), prefill=True)
    h_exit = target.forward(ids, split, 0, 0, 2, prefill=True).hidden
    rest = target.forward(h_exit, split, 0, 2, head=True, prefill=True)
    assert set(out.captured) == {1}
    torch.testing.assert_close(out.captured[1], h_exit, rtol=0, atol=0)
    torch.testing.assert_close(out.logits, rest.logits, rtol=0, atol=0)
    for layer in range(target.n_layers):
        torch.testing.assert_close(one.k[layer][:, :6], split.k[layer][:, :6], rtol=0, atol=0)
    wrong = target.forward(ids, target.new_cache(16), 0, head=True, capture=(2,), prefill=True)
    assert not torch.equal(wrong.captured[2], h_exit)  # the capture is the layer asked for, not any
    with pytest.raises(ValueError, match="outside the forward's layers"):
        target.forward(ids, target.new_cache(16), 0, 0, 2, capture=(3,), prefill=True)


def test_cache_cut_back_after_rejected_drafts():
    """After drafting and rejecting, the next logits equal a fresh forward of the accepted prefix."""
    target = TargetModel.tiny("llama", vocab_size=40, n_layers=3, seed=3)
    prefix, drafts = [5, 9, 1, 30, 7], [11, 12, 13, 14]
    cache = target.new_cache(32)
    target.logits(prefix, cache, 0)
    # drafts through the shallow layers only (as a self-drafter does), then all layers
    h = target.layers(target.embed(torch.tensor(drafts)), len(prefix), 0, 1, cache)
    target.layers(h, len(prefix), 1, target.n_layers, cache)
    accepted = drafts[:1]
    cache.crop(len(prefix) + len(accepted))
    nxt = [21, 22]
    after = target.logits(nxt, cache, len(prefix) + len(accepted))
    fresh = target.logits(prefix + accepted + nxt)[-len(nxt):]
    torch.testing.assert_close(after, fresh, rtol=1e-5, atol=1e-5)


def test_cache_refuses_gaps():
    target = TargetModel.tiny("llama", vocab_size=40, n_layers=2, seed=3)
    cache = target.new_cache(16)
    target.logits([1, 2, 3], cache, 0)
    with pytest.raises(RuntimeError, match="gap"):
        target.logits([4], cache, 5)


def test_smollm2_prefill_matches_transformers(smol, first_questions):
    ids = smol.chat_ids([{"role": "user", "content": first_questions[3].turns[0]}])
    with torch.no_grad():
        ref = smol.hf(torch.tensor([ids])).logits[0, -4:]
    ours = smol.logits(ids)[-4:]
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)
    assert smol.n_layers == 30 and smol.vocab_size == 49152
    assert smol.head_weight.data_ptr() == smol.embed_weight.data_ptr()  # tied head shared, not copied


def test_second_load_reuses_the_converted_weights(smol):
    """Once converted, the default model is read from the cache: nothing is converted again."""
    from specharness.model.loading import _converted_default
    first = _converted_default()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = TargetModel.load()
    assert _converted_default() == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert again.name == smol.name and torch.equal(again.head_weight, smol.head_weight)


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2"])
def test_local_hf_directory_runs_through_the_cli(family, smol, tmp_path, capsys):
    """A saved checkpoint of each family loads by path and answers a question end to end."""
    from specharness.cli import main
    from specharness.results import read_results
    tiny = TargetModel.tiny(family, vocab_size=smol.vocab_size, n_layers=2, hidden_size=32, seed=7)
    tiny.hf.save_pretrained(tmp_path / family)
    smol.tokenizer.save_pretrained(tmp_path / family)
    out = tmp_path / "r.jsonl"
    assert main(["run", "--model", str(tmp_path / family), "--subtasks", "qa", "--limit", "1",
                 "--max-new-tokens", "5", "--warmup", "0", "--out", str(out)]) == 0
    meta, recs = read_results(out)
    assert meta["model"] == family and recs[0].new_tokens == [5]


def test_a_kernel_that_cannot_build_leaves_sdpa_with_a_one_line_note(monkeypatch, capsys):
    """No compiler, no ninja, a compile error: the engine says so in one line and attends through SDPA."""
    from torch.utils import cpp_extension

    def fail(*args, **kwargs):
        raise RuntimeError("Error building extension 'specharness_narrow_attention'\n[1/2] c++ ... (the whole log)")

    monkeypatch.setattr(narrow_attention, "_state", {})
    monkeypatch.setattr(narrow_attention.torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(cpp_extension, "load", fail)
    target = TargetModel.tiny("llama", vocab_size=32, n_layers=1, hidden_size=128, n_heads=2, n_kv_heads=1, dtype="bfloat16")
    assert not target.attention.narrow and not target.kernel_flags()["narrow_attention"]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "C++ kernels" in ln and "unavailable" in ln]
    assert lines == ["engine: the engine's C++ kernels are unavailable: its build failed (RuntimeError: Error building "
                     "extension 'specharness_narrow_attention'); SDPA serves every width (and oneDNN or inductor every "
                     "linear layer)"]
    assert narrow_attention.reason().startswith("its build failed")
    assert target.logits([1, 2, 3]).shape == (3, 32)  # and the forward runs


def test_per_layer_views_and_the_whole_cache_see_each_others_writes():
    """Every forward writes the whole ``keys``/``values`` tensors by layer index (one graph input, one
    dynamic size); readers of one layer (tests, training code) use the per-layer views ``k[i]``/``v[i]``,
    and compaction moves every layer at once. Each must see what the others wrote, layer by layer."""
    target = TargetModel.tiny("llama", vocab_size=40, n_layers=3, seed=3)
    cache = target.new_cache(16)
    assert cache.keys.shape == (3, target.n_kv_heads, 16, target.head_dim)
    target.forward(torch.tensor([5, 9, 1]), cache, 0, head=True)  # the stack: writes by layer index
    for layer in range(3):
        assert cache.k[layer].data_ptr() == cache.keys[layer].data_ptr()
        assert cache.k[layer][:, :3].abs().sum() > 0 and cache.v[layer][:, :3].abs().sum() > 0
        assert cache.k[layer][:, 3:].abs().sum() == 0  # nothing past the slots written
    x = torch.randn(2, target.hidden_size)
    w = target.layers_w[1].attn
    cache.lengths = [3, 3, 3]
    target.attention_block(x, w, cache, 1, 3, target.rope(3, 2))  # a drafter's own attention block (eager)
    assert cache.keys[1][:, 3:5].abs().sum() > 0 and cache.keys[0][:, 3:5].abs().sum() == 0
    before = cache.keys[:, :, 4].clone()
    cache.compact(3, [1])  # slot 4 -> 3, every layer in one copy
    torch.testing.assert_close(cache.keys[:, :, 3], before, rtol=0, atol=0)
