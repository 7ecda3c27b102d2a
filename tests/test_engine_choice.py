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


@pytest.fixture(autouse=True)
def unpinned(monkeypatch):
    """The suite pins float32/none ($SPECHARNESS_ENGINE); these tests are about what "auto" means."""
    monkeypatch.delenv("SPECHARNESS_ENGINE", raising=False)


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


AMX = ("amx_tile", "amx_bf16", "avx512_bf16", "avx512f")
EAGER = (("float32", "none"), ("bfloat16", "none"))


def never_load(dtype):
    raise AssertionError(f"loaded a {dtype} target: the table needs no measurement")


def uneven(dtype: str) -> TargetModel:
    """Two candidates whose steps differ several times over, so the quiet ranking is not a coin toss."""
    return tiny() if dtype == "float32" else tiny("bfloat16", hidden=256, layers=4)


def test_the_table_answers_without_measuring_and_says_which_row(monkeypatch, own_cache):
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: AMX)
    got = engine_choice.choose("auto", "auto", "smollm2", "cpu", 2, never_load)
    assert (got.dtype, got.compile, got.source) == ("bfloat16", "max-autotune", "table")
    assert got.choice["row"] == "amx" and got.choice["cpu_features"] == list(AMX) and "v6" in got.choice["why"]
    assert not engine_choice.choice_file("smollm2", "cpu", 2).exists()  # nothing measured, nothing cached
    # measured on SmolLM2 at 2 threads: another model or thread count is measured, not assumed
    assert engine_choice.from_table("auto", "auto", "cpu", "other.gguf", 2) is None
    assert engine_choice.from_table("auto", "auto", "cpu", None, 1) is None
    got = engine_choice.choose("float32", "auto", "smollm2", "cpu", 2, never_load)  # the row ranks every candidate
    assert (got.dtype, got.compile, got.choice["row"]) == ("float32", "default", "amx")
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx512_bf16", "avx512f"))  # its own row
    got = engine_choice.from_table("auto", "auto", "cpu", "smollm2", 2)
    assert (got.dtype, got.compile, got.choice["row"]) == ("bfloat16", "max-autotune", "avx512_bf16")
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx512_bf16", "avx512f", "avx2"))  # AVX2's row comes after
    assert engine_choice.from_table("auto", "auto", "cpu", "smollm2", 2).choice["row"] == "avx512_bf16"
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx2",))  # AVX2 alone: its own row
    got = engine_choice.from_table("auto", "auto", "cpu", "smollm2", 2)
    assert (got.dtype, got.compile, got.choice["row"]) == ("bfloat16", "max-autotune", "avx2") and "Zen 3" in got.choice["why"]
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ("avx512f",))  # none of the rows' flags: measured
    assert engine_choice.from_table("auto", "auto", "cpu", "smollm2", 2) is None
    assert engine_choice.from_table("auto", "auto", "cuda", "smollm2", 2) is None  # a GPU is measured, as before
    # profile's measurement, once cached, outranks the table
    engine_choice.save_choice("smollm2", "cpu", 2, {"candidates": [{"dtype": "float32", "compile": "none", "step_ms": 1.0}],
                                              "by": "specharness profile"})
    assert engine_choice.choose("auto", "auto", "smollm2", "cpu", 2, never_load).source == "cached"


def test_a_partial_request_the_row_does_not_cover_is_measured_not_cached(monkeypatch, own_cache):
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: AMX)
    monkeypatch.setattr(engine_choice, "KNOWN_BEST", (engine_choice.KnownBest(  # a row that ranks two only
        "amx", "amx_tile", (("bfloat16", "max-autotune"), ("float32", "none")), "why", "m", 1),))
    monkeypatch.setattr(engine_choice, "CANDIDATES", EAGER)
    monkeypatch.setattr(engine_choice, "contention", lambda *a: None)
    got = engine_choice.choose("float32", "auto", "m", "cpu", 1, uneven)
    assert (got.dtype, got.compile, got.source) == ("float32", "none", "measured")
    assert not engine_choice.choice_file("m", "cpu", 1).exists()  # float32 alone would pass for every candidate


def test_the_header_says_which_row_was_used(monkeypatch, capsys):
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: AMX)
    monkeypatch.setattr(engine_choice, "KNOWN_BEST", (engine_choice.KnownBest("amx", "amx_tile", EAGER, "why", "m", 1),))
    monkeypatch.setattr(TargetModel, "load", classmethod(lambda cls, m, dtype, *a, **k: tiny(dtype)))
    engine = Session(EngineRequest("m", threads=1)).target.engine
    assert engine["chosen"] == "table" and engine["choice"] == {"source": "table", "row": "amx",
                                                                "cpu_features": list(AMX), "why": "why"}


def test_a_flagged_measurement_is_not_cached_and_is_redone(monkeypatch, own_cache, capsys):
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ())  # no row: measured
    monkeypatch.setattr(engine_choice, "CANDIDATES", EAGER)
    import os
    busy = len(os.sched_getaffinity(0)) - 1 + 0.8  # the cores our one thread leaves free, and most of ours
    monkeypatch.setattr(engine_choice, "others_busy", lambda *a: busy)
    loads: list[str] = []
    load = lambda dtype: loads.append(dtype) or uneven(dtype)  # noqa: E731
    got = engine_choice.choose("auto", "auto", "m", "cpu", 1, load)
    assert got.source == "measured" and f"{busy:.1f} core(s)" in got.choice["flagged"]
    assert not engine_choice.choice_file("m", "cpu", 1).exists() and "not cached" in capsys.readouterr().err
    assert engine_choice.choose("auto", "auto", "m", "cpu", 1, load).source == "measured" and len(loads) == 4


def busy_loops() -> list:
    """One spinning process pinned to each core this process may use: a CPU-bound job sharing them."""
    import os
    import subprocess
    import sys
    return [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{c}}})\nwhile True: pass"])
            for c in sorted(os.sched_getaffinity(0))]


def test_a_choice_made_under_load_equals_the_quiet_one_or_is_flagged_and_not_cached(monkeypatch, own_cache):
    import time
    monkeypatch.setattr(engine_choice, "CANDIDATES", EAGER)
    monkeypatch.setattr(engine_choice, "cpu_features", lambda: ())  # no table row (no AMX): a measurement
    check = engine_choice.contention
    monkeypatch.setattr(engine_choice, "contention", lambda *a: None)  # the quiet reference (tests share cores)
    quiet = engine_choice.choose("auto", "auto", "m", "cpu", 1, uneven)
    engine_choice.choice_file("m", "cpu", 1).unlink()
    monkeypatch.setattr(engine_choice, "contention", check)
    loops = busy_loops()
    try:
        time.sleep(0.3)
        loaded = engine_choice.choose("auto", "auto", "m", "cpu", 1, uneven)
        monkeypatch.setattr(engine_choice, "cpu_features", lambda: AMX)  # a table row: load cannot touch it
        table = engine_choice.choose("auto", "auto", "smollm2", "cpu", 2, never_load)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    cached = engine_choice.choice_file("m", "cpu", 1).exists()
    if loaded.choice.get("flagged"):
        assert not cached
    else:
        assert (loaded.dtype, loaded.compile) == (quiet.dtype, quiet.compile) and cached
    assert (table.dtype, table.compile) == (engine_choice.from_table("auto", "auto", "cpu", "smollm2", 2).dtype,
                                            "max-autotune")


@pytest.mark.slow  # 41-61 s of building graphs three times for the progress lines' wording and estimates
def test_compile_progress_names_each_graph_and_a_second_run_estimates_from_the_first(own_cache, graph_store):
    from specharness.compile_progress import CompileProgress, read_times, times_file
    path = times_file("m", "float32", "default")
    runs: list[list[str]] = []
    for _ in range(3):  # three runs of one engine: a fresh target each, as another process would have
        lines: list[str] = []
        target = tiny()
        before = read_times(path)  # what the process knows before it compiles anything

        def watch(b) -> None:
            b.store.jobs = 2  # builds two at a time, as on a 2-core machine (a pinned test worker has one core)
            b.on_new_graph = CompileProgress(b, path, lines.append, before)
        assert engine_choice.apply(target, "default", watch) == ("default", None)
        target.backend.on_new_graph.save()
        if not runs:  # its warm-up, after the compile check saved: no estimate from the check's own graphs
            warm: list[str] = []
            CompileProgress(target.backend, path, warm.append, before)(next(iter(target.backend.graphs)))
            assert "no estimate yet" in warm[0], warm
        runs.append(lines)
    first, second, third = runs
    assert len(first) == len(target.backend.graphs) >= 2  # one line per graph compiled
    # the compile check's graphs build side by side in child processes (the graph store, CPU)
    assert first[0].startswith("building graph 1 (layers 0-1 +head") and "no estimate yet" in first[0]
    assert "in the background (" in first[0] and " at a time)" in first[0]
    # the second run loads what the first built: the first's build times do not pass for load times
    assert second[0].startswith("loading graph 1") and "1 more expected (loading: no time measured here yet)" in second[0]
    assert "0 more expected" in second[-1]
    assert third[0].startswith("loading graph 1") and "1 more expected, about" in third[0]
    assert "s to go (earlier runs' load times)" in third[0]
    stored = json.loads(path.read_text())
    for kind in ("builds", "loads"):  # the first run's build times are kept beside the later runs' loads
        assert len(stored[kind]) == len(target.backend.graphs) and all(s > 0 for s in stored[kind].values())
    assert sum(stored["loads"].values()) < sum(stored["builds"].values())


def test_the_profiles_width_curve_times_the_widths_in_turns():
    """Each width's forward in turn, the first width rotating, so a slow spell falls on them all; each
    forward runs at its own width and leaves the cache at the context it found."""
    t = tiny()
    widths, ran = [1, 2, 4], []
    forward = t.forward
    t.forward = lambda x, cache, start, *a, **k: (ran.append((x.shape[0], start, cache.lengths[0]))
                                                  or forward(x, cache, start, *a, **k))
    try:
        curve = engine_choice.width_curve_ms(t, 8, widths, repeats=2)
    finally:
        del t.forward
    assert list(curve) == widths and all(ms > 0 for ms in curve.values())
    steps = [(w, start, length) for w, start, length in ran if start == 8]  # after the steppers' prefills
    assert all(length == 8 for _, _, length in steps)  # each found the context alone: the one before was cropped
    assert [w for w, _, _ in steps] == [1, 2, 4, 2, 4, 1, 4, 1, 2, 1, 2, 4, 2, 4, 1]  # 3 warm rounds, 2 timed
