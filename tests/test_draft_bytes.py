"""The bytes of weights a draft token reads (``read_bytes``, each drafter's ``draft_bytes``), counted
against the transformers model's own parameters, and the profile's per-token cost / byte roofline."""

from __future__ import annotations

import pytest

from specharness.model import TargetModel, read_bytes
from specharness.options import resolve_options
from specharness.plugins import build_registry


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=40, n_layers=4, hidden_size=32, seed=3)


def nbytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def hf_layer(tiny, i: int, part: str) -> int:
    layer = tiny.hf.model.layers[i]
    if part == "attn":
        return nbytes(layer.self_attn.parameters()) + nbytes(layer.input_layernorm.parameters())
    return nbytes(layer.mlp.parameters()) + nbytes(layer.post_attention_layernorm.parameters())


def test_a_step_reads_every_parameter_but_the_embedding_lookup(tiny):
    tied = tiny.hf.lm_head.weight is tiny.hf.model.embed_tokens.weight
    want = nbytes(tiny.hf.parameters()) - (0 if tied else nbytes(tiny.hf.model.embed_tokens.parameters()))
    assert read_bytes(tiny.layers_w, tiny.norm_weight, tiny.head_weight) == want


def test_skipped_sublayers_are_not_read(tiny):
    full = read_bytes(tiny.layers_w)
    assert read_bytes(tiny.layers_w, skip=((1,), (2, 3))) == \
        full - hf_layer(tiny, 1, "attn") - hf_layer(tiny, 2, "mlp") - hf_layer(tiny, 3, "mlp")


def _drafter(tiny, method: str, options: list[str]):
    spec = build_registry().method(method)
    return spec.build(tiny, resolve_options(method, spec.options, options))


def test_each_drafter_says_what_a_draft_token_reads(tiny):
    elt, H = tiny.head_weight.element_size(), tiny.hidden_size
    head = tiny.vocab_size * H * elt
    norm = nbytes([tiny.norm_weight])
    shallow = sum(hf_layer(tiny, i, p) for i in range(2) for p in ("attn", "mlp"))
    assert _drafter(tiny, "early_exit", ["exit_layer=2"]).draft_bytes == shallow + norm + head
    kg = _drafter(tiny, "kangaroo", ["exit_layer=2", "adapter=random"])
    adapter = kg.adapter  # the published layout: attention block and norms, no MLP
    assert kg.draft_bytes == shallow + nbytes(adapter.parameters()) + head
    ss = _drafter(tiny, "self-spec", ["skip=a1,m2"])
    assert ss.draft_bytes == read_bytes(tiny.layers_w) - hf_layer(tiny, 1, "attn") - hf_layer(tiny, 2, "mlp") \
        + norm + head
    eagle = _drafter(tiny, "eagle", ["head=untrained", "draft_vocab=0"])
    head_params = dict(eagle.head.named_parameters())
    assert eagle.draft_bytes == nbytes(head_params.values()) + head  # every parameter of the head, and the LM head
    md = _drafter(tiny, "medusa", ["heads_path=random", "heads=3"])  # shared head: read once for the 3 heads
    blocks = nbytes(md.heads.parameters())
    assert md.draft_bytes == (blocks + head) // 3


def test_the_profile_gives_per_token_cost_over_the_byte_roofline():
    from specharness.profile import markdown
    p = {"model": "m", "cpu": "c", "threads": 2, "torch": "t", "bandwidth_gbs": 20.0, "command": "x",
         "rooflines": {"bfloat16": {"ms": 13.5}}, "hf_generate": {}, "configs": [],
         "chosen": {"dtype": "bfloat16", "compile": "max-autotune"},
         "drafters": {"early_exit": {"draft_fixed_ms": 1.0, "draft_per_token_ms": 3.0, "bookkeeping_ms": 0.4,
                                     "draft_bytes": 20_000_000},  # 1 ms at 20 GB/s
                      "pld": {"draft_fixed_ms": 0.0, "draft_per_token_ms": 0.0, "bookkeeping_ms": 0.5,
                              "draft_bytes": 0}}}
    text = markdown(p)
    assert "| early_exit | 1.00 | 3.00 | 1.00 ms (20.0) | 3.00 | - | 0.40 |" in text  # no target step measured
    assert "| pld | 0.00 | 0.00 | - | - | - | 0.50 |" in text
    # the target's own step: 200 MB in 10 ms at its cheapest width of 1-8 (the width-16 one is not its step)
    p["rooflines"]["bfloat16"]["weight_bytes"] = 200_000_000
    p["configs"] = [{"dtype": "bfloat16", "compile": "max-autotune",
                     "by_width": {"256": {"1": 12.0, "2": 11.0, "8": 10.0, "16": 5.0}}}]
    text = markdown(p)
    assert "20.0 GB/s (its weight bytes over its cheapest step" in text
    assert "| early_exit | 1.00 | 3.00 | 1.00 ms (20.0) | 3.00 | 3.00 | 0.40 |" in text  # 3 ms against 1 ms at 20 GB/s
    p["drafters_config"] = {"dtype": "float32", "compile": "none"}  # the drafters ran in another engine: no rate
    assert "| early_exit | 1.00 | 3.00 | 1.00 ms (20.0) | 3.00 | - | 0.40 |" in markdown(p)


def test_the_profile_says_when_transformers_timings_contradict_each_other():
    """generate's step includes a one-position forward: a forward timed above the step was
    disturbed, and profile.md says so above the tables (a consistent pair says nothing)."""
    from specharness.profile import hf_disturbed, markdown
    h = {"step_ms": 44.8, "step_context": 256, "by_width": {"256": {"1": 61.1, "4": 49.9}}}
    p = {"model": "m", "cpu": "c", "threads": 2, "torch": "t", "bandwidth_gbs": 20.0, "command": "x",
         "rooflines": {"bfloat16": {"ms": 13.5}}, "hf_generate": {"bfloat16": h}, "configs": []}
    assert "61.1 ms, above generate's whole step (44.8 ms)" in hf_disturbed(h)
    assert "**Warning** (bfloat16): transformers' one-position forward timed 61.1 ms" in markdown(p)
    h["by_width"]["256"]["1"] = 40.2
    assert hf_disturbed(h) is None and "Warning" not in markdown(p)
    assert hf_disturbed({"step_ms": 44.8}) is None  # nothing timed by width: nothing to contradict


def test_the_profile_times_generates_step_and_the_forward_it_includes_in_turns(monkeypatch):
    """A disturbance during one of them alone made n10-v8's forward(1) exceed the whole step: the
    two are timed alternately and each is the median of its turns; other widths as before."""
    from types import SimpleNamespace

    from specharness import profile
    calls, steps, ones = [], iter([50.0, 44.0, 45.0]), iter([61.0, 40.0, 41.0])
    monkeypatch.setattr(profile, "hf_step_ms", lambda t, context, repeats: calls.append("step") or next(steps))

    def forward(t, context, width, repeats=7):
        calls.append(f"forward {context}/{width}")
        return next(ones) if width == 1 and context == 256 else float(width)
    monkeypatch.setattr(profile, "hf_forward_ms", forward)
    monkeypatch.setattr(profile, "hf_prefill_ms", lambda t, n: 1.0)
    out = profile.hf_costs(SimpleNamespace(dtype="bfloat16"), widths=[1, 4], contexts=[256, 1024],
                           log=lambda line: None, prefills=(64,))
    assert calls[:6] == ["step", "forward 256/1"] * 3
    assert calls[6:] == ["forward 256/4", "forward 1024/1", "forward 1024/4"]
    assert out["step_ms"] == 45.0 and out["by_width"]["256"] == {"1": 41.0, "4": 4.0}
    assert profile.hf_disturbed(out) is None

