"""One-position forwards padded to the width-2 graph where that graph is the faster one: the same
tokens, no width-1 graph compiled, and the choice made only where it was measured."""

from __future__ import annotations

import pytest
import torch

from specharness.engine import generate
from specharness.engine_options import EngineOptions
from specharness.errors import UsageError
from specharness.methods.vanilla import NoDraft
from specharness.model import TargetModel, backends
from specharness.verify import greedy


def test_auto_pads_only_on_the_measured_cpu_dtype_and_mode(monkeypatch):
    from specharness.model import engine_choice
    cpu = torch.device("cpu")
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx512_bf16", "avx512f"))
    assert backends.narrowest_width("auto", torch.bfloat16, "max-autotune", cpu)[0] == 2
    assert backends.narrowest_width("auto", torch.float32, "max-autotune", cpu)[0] == 1
    assert backends.narrowest_width("auto", torch.bfloat16, "default", cpu)[0] == 1
    assert backends.narrowest_width("auto", torch.bfloat16, "max-autotune", torch.device("cuda"))[0] == 1
    assert backends.narrowest_width("1", torch.bfloat16, "max-autotune", cpu) == (1, "asked")
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("amx_tile", "avx512_bf16"))  # AMX: not measured so
    assert backends.narrowest_width("auto", torch.bfloat16, "max-autotune", cpu)[0] == 1
    with pytest.raises(UsageError, match="SPECHARNESS_NARROWEST"):
        EngineOptions.from_env({"SPECHARNESS_NARROWEST": "3"})
    assert EngineOptions.from_env({"SPECHARNESS_NARROWEST": "2"}).narrowest == "2"


def test_padded_single_positions_give_the_same_tokens_and_no_width_one_graph():
    torch.set_num_threads(1)
    padded = TargetModel.tiny("llama", vocab_size=48, n_layers=2, hidden_size=32, seed=8,
                              options=EngineOptions(narrowest="2"))
    padded.compile("default")
    eager = TargetModel.tiny("llama", vocab_size=48, n_layers=2, hidden_size=32, seed=8)
    for prompt in ([5], list(range(3, 20))):  # a one-token prompt's prefill is padded too
        want = generate(eager, NoDraft(), greedy, prompt, 6).token_ids
        assert generate(padded, NoDraft(), greedy, prompt, 6).token_ids == want
    assert 1 not in {g.width for g in padded.backend.graphs} and 2 in {g.width for g in padded.backend.graphs}
    assert padded.precompile(1) == 0  # nothing left: the width-2 graph serves one position
    assert padded.kernel_flags()["narrowest_width"] == 2
