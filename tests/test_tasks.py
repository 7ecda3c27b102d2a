"""Where questions come from: the built-in sample by default, Spec-Bench when asked (downloaded once
from a pinned commit and checked by sha256), a user's file by path. No test reaches the network."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from specharness.errors import UsageError
from specharness.tasks import specbench
from specharness.tasks.specbench import (SAMPLE_FILE, SUBTASKS, describe_selection, find_question_file, load_questions,
                             per_subtask, select)


@pytest.fixture
def server(tmp_path):
    """A web server on 127.0.0.1 serving ``tmp_path``; counts the requests it answers."""
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *a):
            hits.append(a)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()


def test_default_is_the_built_in_sample_and_says_so():
    source = find_question_file()
    assert source.path == SAMPLE_FILE and source.is_sample
    qs = load_questions(source.path)
    lines = describe_selection(source, qs, SUBTASKS, None)
    n = sorted(set(per_subtask(qs).values()))
    assert len(lines) == 1 and "built-in sample" in lines[0] and f"{n[0]} per subtask" in lines[0]
    assert "--bench spec-bench" in lines[0]


def test_a_limit_beyond_the_file_is_said_once():
    qs = load_questions(SAMPLE_FILE)
    have = per_subtask(qs)["qa"]
    lines = describe_selection(find_question_file(), qs, ("qa", "rag"), have + 3)
    assert sum("--limit" in line for line in lines) == 1
    assert f"qa ({have})" in lines[-1] and len(select(qs, ("qa",), have + 3)) == have
    assert not [x for x in describe_selection(find_question_file(), qs, ("qa",), have) if "--limit" in x]


def test_spec_bench_is_downloaded_checked_and_cached(server, monkeypatch, tmp_path):
    url, hits = server
    body = SAMPLE_FILE.read_bytes()  # stands in for Spec-Bench's file: the pin is what is tested
    (tmp_path / "question.jsonl").write_bytes(body)
    monkeypatch.setattr(specbench, "SPEC_BENCH_SHA256", hashlib.sha256(body).hexdigest())
    monkeypatch.setenv("SPECHARNESS_SPECBENCH_URL", f"{url}/question.jsonl")
    source = find_question_file(bench="spec-bench")
    assert source.origin == "spec-bench" and source.path.read_bytes() == body
    assert len(hits) == 1
    assert find_question_file(bench="spec-bench").path == source.path and len(hits) == 1  # cached


def test_spec_bench_with_the_wrong_checksum_is_refused(server, monkeypatch, tmp_path):
    url, _ = server
    (tmp_path / "question.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ["tampered"]}\n')
    monkeypatch.setenv("SPECHARNESS_SPECBENCH_URL", f"{url}/question.jsonl")
    with pytest.raises(UsageError, match="refusing it") as err:
        find_question_file(bench="spec-bench")
    assert "--bench-file" in str(err.value) and "\n" not in str(err.value)


def test_spec_bench_offline_says_how_to_get_the_file(server, monkeypatch):
    url, _ = server
    monkeypatch.setenv("SPECHARNESS_SPECBENCH_URL", f"{url}/missing.jsonl")  # a 404, as good as offline
    with pytest.raises(UsageError, match="cannot download") as err:
        find_question_file(bench="spec-bench")
    assert specbench.SPEC_BENCH_URL in str(err.value) and "--bench-file PATH" in str(err.value)
    monkeypatch.setenv("SPECHARNESS_SPECBENCH_URL", "http://127.0.0.1:9/question.jsonl")  # nothing listens
    with pytest.raises(UsageError, match="cannot download"):
        find_question_file(bench="spec-bench")


def test_environment_variable_and_explicit_file(monkeypatch, tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"question_id": 7, "category": "qa", "turns": ["hi"]}\n')
    monkeypatch.setenv("SPECHARNESS_SPECBENCH", str(mine))
    assert find_question_file().origin == "$SPECHARNESS_SPECBENCH"
    assert find_question_file(str(SAMPLE_FILE)).origin == "--bench-file"
    assert find_question_file(bench="sample").path == SAMPLE_FILE  # asking for the sample wins over the variable
    monkeypatch.setenv("SPECHARNESS_SPECBENCH", str(tmp_path / "gone.jsonl"))
    with pytest.raises(UsageError, match="does not exist"):
        find_question_file()


def test_full_spec_bench_file(specbench_file):
    """Opt-in ($SPECHARNESS_TEST_SPECBENCH): the file the pin names, 80 questions per subtask."""
    assert specbench.sha256_of(Path(specbench_file)) == specbench.SPEC_BENCH_SHA256
    qs = load_questions(specbench_file)
    assert len(qs) == 480 and set(per_subtask(qs).values()) == {80}
    assert all(len(q.turns) == 2 for q in qs if q.subtask == "multi_turn")
