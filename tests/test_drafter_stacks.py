"""Drafter heads of the target's layout run through the target's own backend (``TargetModel.add_stack``):
Kangaroo's adapter block and EAGLE's draft layer compute what their own (training) code computes,
their graphs are compiled in warm-up with the target's, nothing compiles while timing, and the
output stays the target's own greedy output."""

from __future__ import annotations

import pytest
import torch

from methods.eagle.head import EagleHead
from methods.kangaroo.adapter import Adapter
from specharness.model import HeadShape, TargetModel


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=40, n_layers=3, hidden_size=32, seed=3)


def _noisy(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter moved off its initial value, so a weight read from the wrong place shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return module.eval()


@pytest.mark.parametrize("variant", ["published", "ffn", "own-head", "draft-vocab"])
def test_the_kangaroo_stack_computes_what_the_adapter_computes(tiny, variant):
    rows = torch.tensor([0, 3, 5, 8, 13, 21])
    adapter = _noisy(Adapter.from_target_layer(tiny, 1, ffn=variant == "ffn",
                                               head_rows=rows if variant == "own-head" else None), 1)
    subset = tiny.head_rows(rows) if variant == "draft-vocab" else None
    head = adapter.lm_head.weight.detach() if adapter.own_head_rows else (subset if subset is not None else tiny.head_weight)
    name = tiny.add_stack(f"test-kangaroo-{variant}", [adapter.layer_weights()], adapter.norm.weight.detach(), head)
    skip = ((), ()) if adapter.ffn else ((), (0,))
    x = torch.randn(9, tiny.hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ref_cache, cache = tiny.new_cache(16, n_layers=1), tiny.new_cache(16, n_layers=1)
        adapter(tiny, x[:6], ref_cache, 0)  # a prompt, then a round of three positions
        want = adapter.logits(tiny, adapter(tiny, x[6:], ref_cache, 6), subset)
        tiny.forward(x[:6], cache, 0, stack=name, skip=skip, prefill=True)
        got = tiny.forward(x[6:], cache, 6, stack=name, skip=skip, head=True).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache.k[0][:, :9], ref_cache.k[0][:, :9])


@pytest.mark.parametrize("vocab", ["full", "draft-vocab"])
def test_the_eagle_stack_computes_what_the_head_computes_at_tree_nodes(tiny, vocab):
    """A frontier of tree nodes at their own positions, attending to the prefix and their ancestors at
    scratch slots: the layout EAGLE-2's drafting gives the stack through ``positions`` and ``mask``."""
    head = _noisy(EagleHead.for_target(tiny), 4)
    subset = tiny.head_rows(torch.tensor([1, 2, 3, 5, 7, 11])) if vocab == "draft-vocab" else None
    name = head.add_to(tiny, f"test-eagle-{vocab}", subset, 3)
    g = torch.Generator().manual_seed(5)
    emb, feat = torch.randn(8, tiny.hidden_size, generator=g), torch.randn(8, tiny.hidden_size, generator=g)
    positions = torch.tensor([5, 6, 6])  # two nodes below slot 5's, at depth 2
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[:, 5:] = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    with torch.inference_mode():
        ref_cache, cache = tiny.new_cache(16, n_layers=1), tiny.new_cache(16, n_layers=1)
        pre = torch.arange(5)
        ref_cache.claim(0, 1, 0, 5)
        head(tiny, emb[:5], feat[:5], pre, pre, torch.ones(5, 5, dtype=torch.bool).tril(), ref_cache.keys, ref_cache.values)
        ref_cache.claim(0, 1, 5, 3)
        want = head(tiny, emb[5:], feat[5:], positions, torch.arange(5, 8), mask, ref_cache.keys, ref_cache.values)
        want_logits = tiny.head(want, subset)
        tiny.forward(torch.cat([emb[:5], feat[:5]], -1), cache, 0, stack=name, prefill=True)
        got = tiny.forward(torch.cat([emb[5:], feat[5:]], -1), cache, 5, stack=name, head=True, positions=positions,
                           mask=mask)
    torch.testing.assert_close(head.feature(got.hidden), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.logits, want_logits, rtol=1e-5, atol=1e-5)


def test_a_stack_name_keeps_its_first_weights_and_a_foreign_layout_is_refused(tiny):
    adapter = _noisy(Adapter.for_target(tiny, seed=1), 2)
    layer = adapter.layer_weights()
    name = tiny.add_stack("test-kept", [layer], adapter.norm.weight.detach(), tiny.head_weight)
    first = tiny.backend.stacks[name]
    assert tiny.add_stack(name, [layer], torch.zeros_like(adapter.norm.weight), tiny.head_weight) == name
    assert tiny.backend.stacks[name] is first  # its compiled graphs stay valid
    with pytest.raises(ValueError, match="head layout"):
        tiny.add_stack("test-foreign", [layer], adapter.norm.weight.detach(), tiny.head_weight,
                       shape=HeadShape(tiny.n_heads * 2, tiny.n_kv_heads, tiny.head_dim // 2))


@pytest.mark.parametrize("store", [pytest.param(False, id="torch.compile"),
                                   # Kangaroo's and early exit's stacks too, every graph an AOTInductor package (~3 min)
                                   pytest.param(True, id="graph-store", marks=pytest.mark.slow)])
def test_drafter_graphs_compile_in_warm_up_never_while_timing_and_keep_the_greedy_output(store, monkeypatch):
    """Kangaroo (its shallow layers, adapter and head as one stack), EAGLE-2 (its head stack, at tree
    frontiers) and early exit (a stack of the target's own first layers with a draft-vocabulary head,
    writing the target's cache) on a compiled float32 target: warm-up compiles the drafter stacks'
    graphs, the timed run compiles nothing (no new graph, no dynamo recompile), and all give
    vanilla's tokens; Medusa's heads (no stack) are compiled the same way, as a module. The default run
    compiles EAGLE's stack (the one drafted at tree frontiers, with
    its own positions and mask) through torch.compile; under -m slow, all three through the graph store
    (the user's default), where every stack kind also exports and packages."""
    from specharness import draft_vocab
    from specharness.plugins import build_registry
    from specharness.runner import Settings, build_method, run_question, warm_up
    from specharness.tasks.specbench import Question
    monkeypatch.setenv("SPECHARNESS_AOT_GRAPHS", "1" if store else "0")
    t = TargetModel.tiny("llama", vocab_size=48, n_layers=2, hidden_size=32, seed=6)
    t.chat_ids = lambda messages: [3 + ord(c) % 40 for m in messages for c in m["content"]]
    t.decode = lambda ids: "".join(chr(97 + i % 26) for i in ids)
    t.compile("default")
    ranking = draft_vocab.built_path(t)
    draft_vocab.save(ranking, torch.randperm(48, generator=torch.Generator().manual_seed(1)), None,
                     {"vocab_size": 48})
    registry = build_registry()
    methods = [build_method(registry, "vanilla", [], t, 0.0),
               # a frontier of one node at depth 2 (the stack at its own positions and mask), one draft kept:
               # verification at widths 1-2 only, so the test compiles few graphs
               build_method(registry, "eagle", ["head=untrained", "draft_vocab=0", "depth=2", "top_k=1",
                                                "total_tokens=1"], t, 0.0),
               # Medusa's heads are no stack: the backend compiles them as a module of their own (run_module)
               build_method(registry, "medusa", ["heads_path=random", "heads=2", "tree=chain", "draft_vocab=0"], t, 0.0)]
    if store:
        methods += [build_method(registry, "kangaroo", ["adapter=random", "exit_layer=1", "eta=0", "gamma=1"], t, 0.0),
                    build_method(registry, "early_exit", ["exit_layer=1", "gamma=2", "draft_vocab=20"], t, 0.0)]
    ranking.unlink()
    settings = Settings(12, warmup=1)
    warm = warm_up(t, methods, [Question("w", "qa", "qa", ["warm up on this"])], settings)
    # the whole model's verification, timed at each width compiled for it (the summary's note reads it)
    assert set(warm["verify_ms_by_width"]) == {str(g.width) for g in t.backend.graphs if not g.stack and g.a == 0
                                               and g.head and not g.capture and g.ids and g.width != "wide"}
    stacks = {g.stack.split("-")[0] for g in t.backend.graphs if g.stack}
    assert stacks == {m.name for m in methods[1:]} - {"medusa"}, sorted(g.describe() for g in t.backend.graphs)
    (module, compiled), = t.backend.modules.items()
    assert type(module).__name__ == "DraftStep" and compiled is not module  # compiled in warm-up, not the eager fallback
    if store:  # every stack kind exports and packages (the user's default path), none fell back to torch.compile
        assert t.backend.store.failures == {} and t.backend.store.built == t.backend.graphs
    else:
        assert t.backend.store is None
    # every bucket up to each stack's declared widest call (EAGLE: max(top_k, depth + 1) = 3, bucket 4),
    # whether or not the warm-up prompt reached it; Kangaroo drafts one token a call (and prefills its adapter)
    assert {g.width for g in t.backend.graphs if g.stack.startswith("eagle")} == {1, 2, 4, "wide"}
    assert {g.width for g in t.backend.graphs if g.stack.startswith("kangaroo")} == ({1, "wide"} if store else set())
    announced: list = []
    t.backend.on_new_graph = announced.append
    question = Question("q", "qa", "qa", ["a longer prompt than the warm-up's, to decode from"])
    with torch._dynamo.config.patch(error_on_recompile=True):
        outs = {m.name: run_question(t, m, question, settings).generations[0] for m in methods}
    assert not announced, f"compiled while timing: {[k.describe() for k in announced]}"
    assert all(outs[m.name].token_ids == outs["vanilla"].token_ids for m in methods)
    assert all(sum(r.drafted for r in outs[m.name].rounds) > 0 for m in methods[1:])


def test_a_drafter_module_that_cannot_compile_runs_eagerly_and_says_so(capsys):
    """``run_module`` on a compiled target: a module that cannot be compiled (here one that branches on a
    tensor's value, which a full graph cannot hold) runs eagerly from then on, with one line on stderr,
    instead of ending the run; a module that compiles is kept compiled."""
    class HostRead(torch.nn.Module):
        def forward(self, x):
            return x * 3 if x.sum() > 0 else x

    class Scale(torch.nn.Module):
        def forward(self, x):
            return 2 * x

    t = TargetModel.tiny("llama", vocab_size=16, n_layers=1, hidden_size=16, seed=2)
    t.compile("default")
    bad, good, x = HostRead(), Scale(), torch.ones(3)
    with torch.inference_mode():
        assert torch.equal(t.backend.run_module(bad, x), x * 3) and torch.equal(t.backend.run_module(bad, x), x * 3)
        assert torch.equal(t.backend.run_module(good, x), 2 * x)
    err = capsys.readouterr().err
    assert err.count("note: HostRead could not be compiled") == 1 and "it runs eagerly" in err, err
    assert t.backend.modules[bad] is bad and t.backend.modules[good] is not good
