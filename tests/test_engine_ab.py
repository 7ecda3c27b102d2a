"""Smoke test of specharness.engine_ab, the measurement code results/ scripts import: the full-model
A/B on two tiny eager targets and the attention-alone timing on trivial callables. Structure only
(keys, finite positive medians, one line per context and arm), never speed; a few seconds."""

from __future__ import annotations

import ast
import math

import pytest
import torch

from specharness import engine_ab
from specharness.engine_options import EngineOptions
from specharness.model import TargetModel

WIDTHS, CONTEXTS = (1, 8), (16,)


def tiny(options: EngineOptions) -> TargetModel:
    return TargetModel.tiny(vocab_size=64, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, options=options)


def test_full_model_ab_on_two_tiny_targets():
    lines: list[str] = []
    arms = {"default": EngineOptions(), "sdpa": EngineOptions(narrow_attention="off")}
    targets = {name: engine_ab.compiled_target(name, options, mode="none", widths=WIDTHS, context=16, build=tiny,
                                               log=lines.append) for name, options in arms.items()}
    assert lines == ["default compiled 0 s", "sdpa compiled 0 s"]
    assert targets["sdpa"].options.narrow_attention == "off"
    lines.clear()
    got = engine_ab.time_interleaved(targets, "pytest tests/test_engine_ab.py", widths=WIDTHS, contexts=CONTEXTS,
                                     rounds=2, repeats=2, log=lines.append)
    assert set(got) == {(name, c) for name in arms for c in CONTEXTS}
    for medians in got.values():
        assert list(medians) == list(WIDTHS)
        assert all(math.isfinite(ms) and ms > 0 for ms in medians.values())
    head, *rows = lines
    assert head.startswith("# {")
    record = ast.literal_eval(head[2:])  # the provenance dict, as the committed .txt files carry it
    assert record["command"] == "pytest tests/test_engine_ab.py"
    assert record["threads"] == torch.get_num_threads() and record["rounds"] == 2
    assert record["arms"]["sdpa"]["options"]["narrow_attention"] == "off"
    assert record["arms"]["default"]["compile"] == "none"
    assert len(rows) == len(CONTEXTS) * len(arms)
    for (name, c), row in zip(got, rows):
        assert row.startswith(f"ctx {c} {name} {got[name, c]} 8/1 ") and " rounds {1: [" in row


def test_an_arm_that_fell_back_to_eager_is_refused(monkeypatch):
    monkeypatch.setattr(engine_ab, "apply", lambda target, mode: ("none", "no compiler"))
    with pytest.raises(RuntimeError, match="fell back to none"):
        engine_ab.compiled_target("arm", mode="default", widths=WIDTHS, build=tiny, log=lambda s: None)


def test_time_layers_warm_and_cold():
    shape = engine_ab.LayerShape(kv_heads=1, group=2, head_dim=16, slots=32, hidden=16, gemm_rows=32, layers=3)
    inputs = engine_ab.attention_inputs(2, 20, shape, causal=True)
    assert inputs.bias[0, 19] == float("-inf") and inputs.bias[1, 19] == 0 and inputs.bias[0, 18] == 0
    assert inputs.group_bias.shape == (4, 20) and len(inputs.junk) == 3
    assert inputs.sdpa(0).shape == (1, 1, 4, 16)
    fs = {"none": lambda i: None, "sum": lambda i: inputs.k_caches[i].sum(), "sdpa": inputs.sdpa}
    got = engine_ab.time_layers(fs, inputs.x, inputs.junk, rounds=2)
    assert set(got) == {"sum", "sdpa"}
    for warm, cold in got.values():
        assert math.isfinite(warm) and warm > 0 and math.isfinite(cold)  # cold less the GEMMs' time: may be ~0
    with pytest.raises(ValueError, match="'none'"):
        engine_ab.time_layers({"sum": fs["sum"]}, inputs.x, inputs.junk, rounds=1)
