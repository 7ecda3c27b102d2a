"""Our C++ attention kernel failing at run time falls back to SDPA (issue 33): the forward completes
with SDPA's logits, one line on stderr says why, and result headers record the fallback. Its build
is keyed by the compiler too.

The failing kernel is a stand-in op that raises (with a fake kernel, so compiled graphs call it as
an extern op, as they call the real one), and the kernel is forced "available": these tests run on
every machine, whether or not the real kernel can be built here.
"""

from __future__ import annotations

import pytest
import torch

from specharness.engine_options import EngineOptions
from specharness.model import TargetModel, layers
from specharness.model.accel import narrow_attention

SHAPE = dict(vocab_size=64, n_layers=2, hidden_size=128, n_heads=2, n_kv_heads=1, seed=3, dtype="bfloat16")
LINE = ("engine: the narrow attention kernel failed (RuntimeError: narrow kernel: boom); SDPA serves every width "
        "from now on (SPECHARNESS_NARROW_ATTENTION=0 skips the kernel)")


@torch.library.custom_op("specharness_test::narrow_fails", mutates_args=())
def narrow_fails(rows: torch.Tensor) -> torch.Tensor:
    """What a kernel failing at run time does: raise, with a message of more than one line."""
    raise RuntimeError("narrow kernel: boom\n(the rest of a long message)")


@narrow_fails.register_fake
def _(rows: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(rows, dtype=torch.float32)


@pytest.fixture
def failing_kernel(monkeypatch):
    """The narrow kernel "available" (its AVX512-BF16 path, up to 8 positions) and raising when called."""
    monkeypatch.setattr(narrow_attention, "_state", {"loaded": True, "why": None})
    monkeypatch.setattr(narrow_attention, "library", lambda: "avx512-bf16")  # the build that holds attention
    monkeypatch.setattr(narrow_attention, "kind", lambda mode="on": "avx512-bf16")
    monkeypatch.setattr(narrow_attention, "narrow_attention",
                        lambda rows, k, v, bias, kind="avx512-bf16": torch.ops.specharness_test.narrow_fails(rows))


def pair(compile_mode: str = "none") -> tuple[TargetModel, TargetModel]:
    """The same tiny bfloat16 model twice: with the narrow kernel serving, and on SDPA."""
    narrow, sdpa = TargetModel.tiny("llama", **SHAPE), TargetModel.tiny("llama", **SHAPE,
                                                                       options=EngineOptions(narrow_attention="off"))
    assert narrow.attention.narrow == "avx512-bf16" and not sdpa.attention.narrow
    for t in (narrow, sdpa):
        t.engine.update(t.kernel_flags())  # as a session records it in result headers
        if compile_mode != "none":
            t.compile(compile_mode)
            t.expect_widths(8)
    return narrow, sdpa


def test_a_kernel_failing_eagerly_falls_back_to_sdpa_with_one_line(failing_kernel, capsys):
    narrow, sdpa = pair()
    capsys.readouterr()
    prompt = [5, 6, 7, 8, 9]
    assert narrow.greedy_continuation(prompt, 6) == sdpa.greedy_continuation(prompt, 6)
    assert capsys.readouterr().err.splitlines() == [LINE]
    assert torch.equal(narrow.logits(prompt + [1, 2]), sdpa.logits(prompt + [1, 2]))
    flag = "sdpa (fallback: RuntimeError: narrow kernel: boom)"
    assert narrow.kernel_flags()["narrow_attention"] == narrow.engine["narrow_attention"] == flag
    assert narrow.backend.stack.attention is narrow.attention and not narrow.attention.narrow
    # for the rest of the process: a target built now takes SDPA and says why; nothing more is printed
    later = TargetModel.tiny("llama", **SHAPE)
    assert not later.attention.narrow and later.kernel_flags()["narrow_attention"] == flag
    assert capsys.readouterr().err == ""


def test_a_kernel_failing_inside_a_compiled_graph_recompiles_it_on_sdpa(failing_kernel, capsys):
    narrow, sdpa = pair("default")
    logits = []
    with torch.inference_mode():
        for t in (narrow, sdpa):
            cache = t.new_cache(64)
            t.forward(torch.tensor([5, 6, 7, 8, 9]), cache, 0)  # width 8: the static graph, where the kernel serves
            logits.append(t.forward(torch.tensor([3, 4]), cache, 5, head=True).logits)
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("engine: the narrow attention kernel failed (RuntimeError: "), lines
    assert narrow.engine["narrow_attention"].startswith("sdpa (fallback: RuntimeError: ")


def test_a_failure_that_is_not_the_kernels_is_raised_and_keeps_the_kernel(failing_kernel, monkeypatch, capsys):
    """The rerun on SDPA fails too: the kernel was not the cause, so it is not blamed."""
    narrow, _ = pair()
    capsys.readouterr()

    def broken(*args):
        raise ValueError("an MLP bug")
    monkeypatch.setattr(layers, "mlp", broken)
    with pytest.raises(ValueError, match="an MLP bug"):
        narrow.logits([1, 2, 3])
    assert narrow.attention.narrow == "avx512-bf16" and narrow.backend.stack.attention is narrow.attention
    assert narrow_attention.failure() is None and capsys.readouterr().err == ""


def test_the_result_header_records_the_fallback(failing_kernel, smol, tmp_path, monkeypatch, capsys):
    """A run whose kernel fails still answers, and its header says SDPA served and why."""
    from specharness.cli import main
    from specharness.results import read_results
    tiny = TargetModel.tiny("llama", **{**SHAPE, "vocab_size": smol.vocab_size})
    tiny.hf.save_pretrained(tmp_path / "tiny")
    smol.tokenizer.save_pretrained(tmp_path / "tiny")
    monkeypatch.setenv("SPECHARNESS_ENGINE", "bfloat16/none")
    out = tmp_path / "r.jsonl"
    assert main(["run", "--model", str(tmp_path / "tiny"), "--subtasks", "qa", "--limit", "1", "--max-new-tokens", "4",
                 "--warmup", "0", "--baseline", "none", "--out", str(out)]) == 0
    meta, records = read_results(out)
    assert meta["engine"]["narrow_attention"] == "sdpa (fallback: RuntimeError: narrow kernel: boom)"
    assert records[0].new_tokens == [4]
    assert [ln for ln in capsys.readouterr().err.splitlines() if "narrow attention" in ln] == [LINE]


def test_the_build_key_changes_with_the_compiler(monkeypatch):
    """A changed compiler rebuilds the kernel rather than loading a library another one built."""
    real, keys = narrow_attention.compiler_identity, []
    for compiler in ("/usr/bin/g++-12 g++ (Debian 12.2.0) 12.2.0", "/usr/bin/g++-13 g++ (Debian 13.1.0) 13.1.0"):
        monkeypatch.setattr(narrow_attention, "compiler_identity", lambda compiler=compiler: compiler)
        keys.append(narrow_attention.build_key())
    assert keys[0] != keys[1] and narrow_attention.build_key() == keys[1]
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert real.__wrapped__() == ""  # uncached: no compiler, an identity of its own
