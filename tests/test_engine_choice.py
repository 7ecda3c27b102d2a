"""How the engine is chosen: ``--engine quick`` compiles nothing, the table answers without
measuring, and a measurement taken under load matches the quiet one or is flagged and not cached."""

from __future__ import annotations

import json

import pytest
import torch
from fixture_results import questions, write_run

from specharness.model import TargetModel, engine_choice
from specharness.results import meta_path
from specharness.session import EngineRequest, Session


def tiny(dtype: str = "float32", hidden: int = 32, layers: int = 1) -> TargetModel:
    return TargetModel.tiny("llama", vocab_size=32, n_layers=layers, hidden_size=hidden, seed=0, dtype=dtype)


def no_compile(*args, **kwargs):
    raise AssertionError("torch.compile was called")


def test_quick_compiles_nothing_and_says_its_numbers_are_not_comparable(monkeypatch, capsys):
    monkeypatch.setattr(torch, "compile", no_compile)
    loads: list[str] = []
    monkeypatch.setattr(TargetModel, "load", classmethod(lambda cls, m, dtype, *a, **k: loads.append(dtype) or tiny(dtype)))
    target = Session(EngineRequest("m", engine="quick")).target
    assert sorted(loads) == ["bfloat16", "float32"]  # both eager dtypes probed, each loaded once
    assert not target.backend.compiled and not target.backend.graphs
    assert target.engine["compile"] == "none" and target.engine["chosen"] == "quick" and target.engine["quick"]
    assert "not comparable with compiled runs" in target.engine["comparable"]
    assert set(target.engine["choice"]["eager_step_ms"]) == {"float32", "bfloat16"}
    assert target.engine["dtype"] == min(target.engine["choice"]["eager_step_ms"],
                                         key=target.engine["choice"]["eager_step_ms"].get)
    assert "engine: quick:" in capsys.readouterr().err
    loads.clear()
    asked = Session(EngineRequest("m", dtype="bfloat16", engine="quick")).target  # a dtype asked: no probe
    assert loads == ["bfloat16"] and asked.engine["quick"] and not asked.backend.compiled


def test_quick_run_header_and_file_name_carry_the_flag(tmp_path, monkeypatch):
    from specharness.cli import main
    monkeypatch.chdir(tmp_path)  # the default store, results/runs/, under a temporary folder
    assert main(["run", "--engine", "quick", "--limit", "1", "--subtasks", "qa", "--baseline", "none",
                 "--max-new-tokens", "4", "--warmup", "0", "--repeats", "1"]) == 0
    [out] = (tmp_path / "results" / "runs").rglob("*.jsonl")
    assert out.name.startswith("vanilla-") and "-quick-temp0-n4" in out.name
    meta = json.loads(meta_path(out).read_text())
    assert meta["engine"]["quick"] and meta["compile"] == "none" and meta["engine"]["chosen"] == "quick"
    assert meta["engine"]["choice"]["source"] == "quick"


def test_report_marks_quick_runs(tmp_path):
    from specharness.cli import main
    from specharness.report.runs import QUICK_MARK
    qs = questions(2)
    write_run(tmp_path / "vanilla.jsonl", "vanilla", {}, qs)
    m = write_run(tmp_path / "k.jsonl", "kangaroo", {"eta": 0.6}, qs, gamma=3, accept=0.5, draft_cost=0.002)
    meta = json.loads(meta_path(m).read_text())
    meta_path(m).write_text(json.dumps({**meta, "engine": {"quick": True}}))
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "table1.md").read_text()
    assert f"kangaroo {QUICK_MARK}" in table and "not comparable with compiled runs" in table
    assert f"vanilla {QUICK_MARK}" not in table


@pytest.mark.parametrize("request_, expected", [
    (EngineRequest(engine="fast"), "unknown --engine 'fast'"),
    (EngineRequest(engine="quick", compile="default"), "--engine quick compiles nothing"),
])
def test_bad_engine_requests_are_one_line(request_, expected):
    from specharness.errors import UsageError
    with pytest.raises(UsageError, match=expected):
        Session(request_)
