"""compare --executor ray on a local Ray cluster the test starts (2 CPUs, a tiny model): the same
tokens as the local executor, every question exactly once when a worker is killed, resume after
the driver is interrupted, and the retry cap for a question that kills every worker it lands on.
Ray is the 'ray' extra (the test extra carries it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from specharness.cli import main  # noqa: E402
from specharness.results import read_results  # noqa: E402

QUICK = ["--subtasks", "qa,rag,translation", "--limit", "2", "--max-new-tokens", "6", "--warmup", "0",
         "--repeats", "1", "--threads", "1", "--methods", "vanilla,pld"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_dir(smol, tmp_path_factory):
    from specharness.model import TargetModel
    d = tmp_path_factory.mktemp("tiny-llama")
    tiny = TargetModel.tiny("llama", vocab_size=smol.vocab_size, n_layers=2, hidden_size=32, seed=7)
    tiny.hf.save_pretrained(d)
    smol.tokenizer.save_pretrained(d)
    return d


def tokens(directory: Path) -> dict:
    out = {}
    for p in sorted(directory.glob("*.jsonl")):
        meta, recs = read_results(p)
        out[meta["method"]] = {r.question_id: r.token_ids for r in recs}
    return out


def test_ray_gives_the_local_tokens_and_names_the_hardware(cluster, tiny_dir, tmp_path):
    assert main(["compare", "--model", str(tiny_dir), "--out-dir", str(tmp_path / "local"), *QUICK]) == 0
    assert main(["compare", "--model", str(tiny_dir), "--out-dir", str(tmp_path / "ray"), "--executor", "ray",
                 "--workers", "2", *QUICK]) == 0
    local, distributed = tokens(tmp_path / "local"), tokens(tmp_path / "ray")
    assert local == distributed and len(local["vanilla"]) == 6
    meta, recs = read_results(next((tmp_path / "ray").glob("pld-*.jsonl")))
    assert meta["executor"]["name"] == "ray" and meta["executor"]["workers"] == 2
    assert all(r.worker and r.worker["threads"] == 1 and "pid" in r.worker for r in recs)


def test_a_killed_worker_loses_no_question_and_duplicates_none(cluster, tiny_dir, tmp_path, monkeypatch):
    from specharness import executors
    original = executors.run_on_ray
    killed = []

    def kill_first(actor, item):
        if not killed:
            killed.append(item[1].question_id)
            ray.kill(actor)  # mid-question: its task fails, the question must run again elsewhere

    def patched(*a, **kw):
        info = original(*a, **{**kw, "on_dispatch": kill_first})
        assert info["retries"] >= 1 and info["workers_started"] >= 3
        return info

    monkeypatch.setattr(executors, "run_on_ray", patched)
    out = tmp_path / "killed"
    assert main(["compare", "--model", str(tiny_dir), "--out-dir", str(out), "--executor", "ray", "--workers", "2",
                 *QUICK]) == 0
    assert killed
    for p in out.glob("*.jsonl"):
        ids = [json.loads(line)["question_id"] for line in p.read_text().splitlines()]
        assert len(ids) == len(set(ids)) == 6  # every question exactly once


def test_resume_after_the_driver_is_interrupted(cluster, tiny_dir, tmp_path, capsys):
    stopper = tmp_path / "stopper.py"
    stopper.write_text("from specharness.hookspecs import hookimpl\n"
                       "seen = []\n"
                       "@hookimpl\n"
                       "def specharness_question_done(result):\n"
                       "    seen.append(result.question_id)\n"
                       "    if len(seen) == 3:\n"
                       "        raise KeyboardInterrupt\n")
    out = tmp_path / "resumed"
    argv = ["compare", "--model", str(tiny_dir), "--out-dir", str(out), "--executor", "ray", "--workers", "2", *QUICK]
    assert main([*argv, "--plugin", str(stopper)]) == 130
    assert "--resume" in capsys.readouterr().err
    written = sum(len(p.read_text().splitlines()) for p in out.glob("*.jsonl"))
    assert 0 < written < 12
    assert main([*argv, "--resume"]) == 0
    for p in out.glob("*.jsonl"):
        ids = [json.loads(line)["question_id"] for line in p.read_text().splitlines()]
        assert len(ids) == len(set(ids)) == 6


@pytest.mark.slow  # the killed-worker test below covers the retry; this one, the cap
def test_a_question_that_kills_every_worker_stops_at_the_cap_and_keeps_the_rest(cluster, tiny_dir, tmp_path, capsys,
                                                                                 monkeypatch):
    """A question whose method ends the worker process every time (a crash in native code, an
    out-of-memory kill) runs again on a new worker only MAX_RETRIES times; then the run ends with
    one line naming it and the cap, and every question finished before it is in the result files."""
    import importlib.util
    import time

    from specharness import executors
    from specharness.executors import MAX_RETRIES
    original, dispatched = executors.run_on_ray, []

    def count(actor, item):  # a broken cap would retry forever: fail instead of hanging
        dispatched.append(item[1].question_id)
        assert dispatched.count(4) <= MAX_RETRIES + 1, "question 4 dispatched past the retry cap"

    monkeypatch.setattr(executors, "run_on_ray", lambda *a, **kw: original(*a, **{**kw, "on_dispatch": count}))
    plugin = Path(__file__).resolve().parent / "fixtures" / "crash_plugins.py"
    spec = importlib.util.spec_from_file_location("crash_plugins", plugin)
    crash = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crash)
    bench = tmp_path / "question.jsonl"
    turns = {1: "Name a colour.", 2: "Name a fruit.", 3: "Name a tree.", 4: f"Say hello; {crash.MARKER}."}
    bench.write_text("".join(json.dumps({"question_id": qid, "category": "qa", "turns": [t]}) + "\n"
                             for qid, t in turns.items()))
    out = tmp_path / "capped"
    capsys.readouterr()
    started = time.perf_counter()
    # one worker: questions 1-3 finish before question 4 is dispatched, so what must be kept is known
    assert main(["compare", "--model", str(tiny_dir), "--bench-file", str(bench), "--methods", "vanilla,exit-on-marker",
                 "--max-new-tokens", "6", "--warmup", "0", "--repeats", "1", "--threads", "1", "--executor", "ray",
                 "--workers", "1", "--plugin", str(plugin), "--out-dir", str(out)]) == 2
    assert time.perf_counter() - started < 600  # a guard against retrying forever, not a timing
    err = [line for line in capsys.readouterr().err.split("\n") if line.strip()]  # a bar's \r is no line end
    last = err[-1]
    assert last.startswith("specharness: error: question 4 ") and "Traceback" not in "\n".join(err), err[-5:]
    assert f"lost its worker {MAX_RETRIES + 1} times" in last and f"at most {MAX_RETRIES} retries" in last, last
    assert sum("worker lost on question 4" in line for line in err) == MAX_RETRIES  # each retry said once
    assert dispatched == [1, 2, 3] + [4] * (MAX_RETRIES + 1)
    for method in ("vanilla", "exit-on-marker"):
        path = next(out.glob(f"{method}-*.jsonl"))
        ids = [json.loads(line)["question_id"] for line in path.read_text().splitlines()]
        assert sorted(ids) == [1, 2, 3], (method, ids)  # nothing computed is lost, nothing duplicated
