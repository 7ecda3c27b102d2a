"""The command line: result files round-trip and resume; every bad input is one line and exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specharness.cli import main
from specharness.plugins import build_registry
from specharness.records import Generation, QuestionResult, Round
from specharness.results import ResultWriter, meta_path, read_results

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--subtasks", "qa", "--max-new-tokens", "6", "--warmup", "0", "--repeats", "1"]


def plugin_example(tmp_path: Path) -> Path:
    """The plugin exactly as the README shows it."""
    text = (ROOT / "README.md").read_text()
    code = re.search(r"<!-- plugin-example -->\s*```python\n(.*?)```", text, re.S).group(1)
    path = tmp_path / "prompt_lookup.py"
    path.write_text(code)
    return path


def raw_records(path: Path) -> list[dict]:
    """The result file's lines as Spec-Bench's tools read them: plain JSON."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def error_line(capsys, argv) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, expected", [
    (["run", "--method", "nope"], "unknown method 'nope'; available: "),
    (["run", "--subtasks", "qa,poetry"], "unknown subtask 'poetry'"),
    (["run", "-o", "gamma=3"], "method 'vanilla' has no option 'gamma'"),
    (["run", "-o", "gamma"], "is not KEY=VALUE"),
    (["run", "--verifier", "lenient"], "unknown verifier 'lenient'; available: greedy, speculative-sampling"),
    (["run", "--verifier", "speculative-sampling"], "needs a temperature > 0"),
    (["run", "--bench-file", "/no/such/question.jsonl"], "does not exist"),
    (["run", "--model", "/no/such/model"], "is not a directory with a config.json"),
    (["run", "--model", "/no/such/model.gguf"], "does not exist"),
    (["run", "--max-new-tokens", "0"], "--max-new-tokens must be positive"),
    (["run", "--temperature", "-0.5"], "--temperature must be a number >= 0"),
    (["run", "--limit", "0"], "--limit must be a positive number"),
    (["compare", "--methods", "vanilla,vanilla"], "listed twice"),
    (["compare", "--methods", "vanilla,hf-generate", "-o", "k=1"], "does not name its method"),
    (["train", "nope"], "unknown trainer 'nope'"),
    (["profile", "-o", "nope.trials=2"], "option 'nope.trials=2' names 'nope', which is not among the methods run"),
    (["compare", "--methods", "vanilla,pld", "-o", "kangaroo.eta=0.3"], "names 'kangaroo', which is not among"),
    (["run", "--method", "pld", "-o", "kangaroo.eta=0.3"], "names 'kangaroo', which is not among the methods run"),
    (["compare", "--methods", "vanilla,kangaroo:eta=0.3", "-o", "kangaroo.gamma=4"],
     "'kangaroo' runs as 'kangaroo:eta=0.3'; write kangaroo:eta=0.3.KEY=VALUE"),
    (["compare", "--methods", "vanilla,pld:k"], "'pld:k' in --methods: 'k' is not KEY=VALUE; write pld:KEY=VALUE"),
    (["run", "--bench-file", "/tmp"], "question file '/tmp' (from --bench-file) is a folder"),
    (["profile", "-o", "self-spec.trial=2"], "method 'self-spec' has no option 'trial'"),
    (["profile", "--methods", "vanilla,nope"], "--methods: no method 'nope'"),
    (["profile", "--variant", "nope:k=1"], "--variant 'nope:k=1': no method 'nope'"),
    (["profile", "--methods", "pld", "-o", "sam.k=2"], "method 'sam' is not profiled; add it to --methods"),
    (["profile", "--passes", "0"], "--passes 0: at least one pass over the drafters"),
    (["run", "--threads", "0"], "--threads must be at least 1, got 0"),
    (["run", "--threads", "100000"], "--threads 100000 is more than this machine's"),
    (["lossless", "--method", "pld", "--threads", "100000"], "--threads 100000 is more than this machine's"),
    (["train", "kangaroo", "--threads", "100000"], "--threads 100000 is more than this machine's"),
    (["run", "--engine", "quick", "--compile", "default"], "--engine quick compiles nothing"),
    (["compare", "--engine", "fast"], "argument --engine: invalid choice: 'fast'"),
    (["run", "--out", "/proc/nope/x.jsonl"], "cannot write results to '/proc/nope/x.jsonl'"),
    (["compare", "--out-dir", "/proc/nope"], "cannot write results to '/proc/nope/x'"),
    (["run", "--bench", "nope"], "argument --bench: invalid choice: 'nope'"),
    (["run", "--limit", "many"], "argument --limit: invalid int value: 'many'"),
    (["run", "--bench", "spec-bench", "--bench-file", "q.jsonl"], "not both"),
    (["run", "--subtasks", ","], "--subtasks ',' names no subtask"),
    (["compare", "--methods", ","], "--methods names no method"),
    (["run", "--temperature", "nan"], "--temperature must be a number >= 0"),
    (["run", "--method", "kangaroo", "-o", "eta=nan"], "option kangaroo.eta must be a finite number, got 'nan'"),
    (["run", "--out", "x.jsonl", "--resume", "--overwrite"], "--overwrite discards them; give one"),
    (["run", "--out", "/tmp", "--overwrite"], "--out '/tmp' is a folder; name a file in it"),
    (["lossless", "--method", "pld", "--effect-a", "0"], "--effect-a must be a positive effect size w"),
    (["lossless", "--method", "pld", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["lossless", "--method", "pld", "--tolerance", "-1"], "--tolerance must be a logit margin >= 0"),
    (["lossless", "--method", "pld", "--json", "/tmp"], "--json '/tmp' is a folder"),
    (["train", "kangaroo", "--out", "/proc/self/status"], "is a file; a training run writes a folder"),
    (["train", "kangaroo", "-o", "lr=inf"], "option kangaroo.lr must be a finite number, got 'inf'"),
    (["profile", "--configs", ","], "--configs ',' names no DTYPE/MODE"),
    (["profile", "--methods", ","], "--methods ',' names no method"),
    (["report", ".", "--profile", "/proc"], "--profile '/proc' is a folder"),
    (["lossless", "--method", "pld", "--levels", "greedy", "--verifier", "speculative-sampling"],
     "--verifier speculative-sampling is a sampling rule, but --levels greedy runs no check it applies to"),
    (["lossless", "--method", "pld", "--levels", "a", "--verifier", "greedy"], "is a greedy rule"),
    (["lossless", "--method", "pld", "--verifier", ","], "--verifier ',' names no acceptance rule"),
    (["lossless", "--method", "pld", "--levels", "greedy,b", "--tiny-option", "k=1"], "--tiny-option sets"),
    (["lossless", "--method", "pld", "--json", "/proc/self/status/x.json"], "'/proc/self/status' is a file, not a folder"),
])
def test_bad_input_is_one_line(capsys, argv, expected):
    assert expected in error_line(capsys, argv)


def test_an_unreadable_line_before_finished_questions_stops_resume_and_report_in_one_line(capsys, tmp_path):
    """A torn last line (a killed run) is dropped on resume; a bad line with records after it is not
    guessed at: cutting the file there would lose the finished questions after it."""
    out = tmp_path / "v.jsonl"
    assert main(["run", "--limit", "2", "--out", str(out), *QUICK]) == 0
    good = out.read_text().splitlines()
    out.write_text(good[0] + "\n{torn\n" + good[1] + "\n")
    for argv in (["run", "--limit", "2", "--out", str(out), "--resume", *QUICK], ["report", str(tmp_path)]):
        assert f"{out}: line 2 is not a JSON record, and finished questions follow it" in error_line(capsys, argv)
    assert out.read_text().splitlines()[2] == good[1]  # nothing cut
    (tmp_path / "v.meta.json").write_text("[]")
    assert "is not a specharness header" in error_line(capsys, ["report", str(tmp_path)])


def test_malformed_question_file_names_the_line(capsys, tmp_path):
    qf = tmp_path / "q.jsonl"
    qf.write_text('{"question_id": 1, "category": "qa", "turns": ["hi"]}\n{"question_id": 2, "turns": \n')
    assert f"{qf}:2: malformed question" in error_line(capsys, ["run", "--bench-file", str(qf)])
    qf.write_text('{"question_id": 1, "category": "qa", "turns": ["hi", " "]}\n')
    assert f"{qf}:1: malformed question (turn 2 is empty)" in error_line(capsys, ["run", "--bench-file", str(qf)])
    qf.write_text('{"question_id": 1, "category": "poetry", "turns": ["hi"]}\n')
    assert "unknown category 'poetry'" in error_line(capsys, ["run", "--bench-file", str(qf)])


def test_a_gguf_file_that_is_not_gguf(capsys, tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"this is not a GGUF file\n" * 100)
    err = error_line(capsys, ["run", "--model", str(fake), *QUICK])
    assert f"'{fake}' cannot be read as a GGUF model" in err


def test_a_checkpoint_transformers_cannot_read_is_one_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    assert "cannot be loaded (OSError: " in error_line(capsys, ["run", "--model", str(tmp_path), *QUICK])
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100}))
    (tmp_path / "model.safetensors").write_bytes(b"xx")  # torn weights
    err = error_line(capsys, ["run", "--model", str(tmp_path), *QUICK])
    assert "cannot be loaded (SafetensorError: " in err and "give a complete local checkpoint" in err


def test_unsupported_architecture(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    assert "supported families: llama, mistral, qwen2" in error_line(capsys, ["run", "--model", str(tmp_path)])


def test_option_out_of_range_from_a_plugin(capsys, tmp_path):
    err = error_line(capsys, ["run", "--plugin", str(plugin_example(tmp_path)), "--method", "prompt-lookup",
                              "-o", "ngram=0"])
    assert "option prompt-lookup.ngram=0 is outside [1, inf]" in err


@pytest.fixture
def qa_questions(sample_questions):
    return [q for q in sample_questions if q.subtask == "qa"]


def test_result_file_round_trip_resume_and_refusals(capsys, tmp_path, qa_questions):
    out = tmp_path / "v.jsonl"
    assert main(["run", "--limit", "1", "--out", str(out), *QUICK]) == 0
    meta, recs = read_results(out)
    assert len(recs) == 1 and meta["method"] == "vanilla" and meta["threads"] >= 1
    for key in ("command", "git_commit", "model", "dtype", "device", "torch", "transformers", "options"):
        assert key in meta
    raw = raw_records(out)[0]
    choice = raw["choices"][0]
    # the fields Spec-Bench's speed.py reads, with the types it needs
    assert isinstance(raw["category"], str)
    assert sum(choice["new_tokens"]) == len(choice["token_ids"][0]) > 0 and sum(choice["wall_time"]) > 0
    assert choice["accept_lengths"] == [1] * sum(choice["new_tokens"]) and isinstance(choice["turns"][0], str)
    assert raw["question_id"] == recs[0].question_id and recs[0].tokens == sum(choice["new_tokens"])  # no header line

    assert "already exists" in error_line(capsys, ["run", "--limit", "2", "--out", str(out), *QUICK])
    err = error_line(capsys, ["run", "--limit", "2", "--out", str(out), "--resume", *QUICK[:-4],
                              "--max-new-tokens", "7", "--warmup", "0"])
    assert "written with max_new_tokens=6" in err

    with open(out, "a") as fh:  # a torn last line, as after kill -9
        fh.write('{"question_id": 999, "choi')
    first = out.read_text().splitlines()[0]
    assert main(["run", "--limit", "2", "--out", str(out), "--resume", *QUICK]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and lines[0] == first
    assert [json.loads(x)["question_id"] for x in lines] == [q.question_id for q in qa_questions[:2]]
    assert len(json.loads(meta_path(out).read_text())["resumed"]) == 1


def test_ctrl_c_keeps_finished_questions_and_resume_continues(capsys, tmp_path, qa_questions):
    stopper = tmp_path / "stopper.py"
    stopper.write_text(
        "from specharness.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def specharness_question_done(result):\n"
        "    raise KeyboardInterrupt\n")
    out = tmp_path / "v.jsonl"
    n = len(qa_questions)
    assert n >= 2
    assert main(["run", "--limit", str(n), "--out", str(out), "--plugin", str(stopper), *QUICK]) == 130
    assert "--resume" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 1
    assert main(["run", "--limit", str(n), "--out", str(out), "--resume", *QUICK]) == 0
    assert [r.question_id for r in read_results(out)[1]] == [q.question_id for q in qa_questions]


def test_readme_plugin_runs_end_to_end_and_is_lossless(capsys, tmp_path):
    plugin = plugin_example(tmp_path)
    argv = ["--subtasks", "summarization", "--limit", "1", "--max-new-tokens", "24", "--warmup", "0", "--repeats", "1"]
    assert main(["run", "--plugin", str(plugin), "--method", "prompt-lookup", "--out",
                 str(tmp_path / "pl.jsonl"), *argv]) == 0
    assert main(["run", "--out", str(tmp_path / "v.jsonl"), *argv]) == 0
    pl, v = raw_records(tmp_path / "pl.jsonl")[0], raw_records(tmp_path / "v.jsonl")[0]
    assert pl["choices"][0]["token_ids"] == v["choices"][0]["token_ids"]
    assert max(pl["choices"][0]["accept_lengths"]) > 1  # summarisation copies: drafts were accepted
    assert "prompt-lookup" in capsys.readouterr().out


def test_list_shows_methods_options_and_subtasks(capsys, tmp_path):
    assert main(["list", "--plugin", str(plugin_example(tmp_path))]) == 0
    out = capsys.readouterr().out
    for text in ("vanilla", "hf-generate", "prompt-lookup", "-o ngram=<int>  default 3", "greedy",
                 "speculative-sampling", "math_reasoning"):
        assert text in out


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"# 2\. .*\n(.*)\n", readme).group(1).strip()
    assert command in (ROOT / ".ci" / "run").read_text()


def test_compare_runs_variants_interleaved_into_one_file_each(capsys, tmp_path):
    plugin = plugin_example(tmp_path)
    assert main(["compare", "--plugin", str(plugin), "--methods", "vanilla,prompt-lookup,prompt-lookup:ngram=2",
                 "-o", "prompt-lookup.k=3", "--limit", "1", "--out-dir", str(tmp_path / "cmp"),
                 *QUICK, "--repeats", "2"]) == 0
    files = sorted(p.name for p in (tmp_path / "cmp").glob("*.jsonl"))
    assert files == ["prompt-lookup-k=3-float32-temp0-n6.jsonl", "prompt-lookup-ngram=2-float32-temp0-n6.jsonl",
                     "vanilla-float32-temp0-n6.jsonl"]
    metas = [read_results(tmp_path / "cmp" / f) for f in files]
    assert [m["options"] for m, _ in metas[:2]] == [{"ngram": 3, "k": 3}, {"ngram": 2, "k": 5}]
    for _, recs in metas:
        assert len(recs[0].wall_time_repeats[0]) == 2
    assert "speedup" in capsys.readouterr().out


def test_run_measures_vanilla_alongside_and_reports_the_speedup(capsys, tmp_path):
    plugin = str(plugin_example(tmp_path))
    out = tmp_path / "res" / "pl.jsonl"
    assert main(["run", "--plugin", plugin, "--method", "prompt-lookup", "--out", str(out), "--limit", "1",
                 *QUICK]) == 0
    captured = capsys.readouterr()
    assert "vanilla runs on the same questions, interleaved" in captured.err
    vanilla = out.parent / "vanilla-float32-temp0-n6.jsonl"
    meta, recs = read_results(vanilla)
    assert meta["compared_with"] == ["vanilla", "prompt-lookup"] and len(recs) == 1
    assert meta["graphs_compiled_while_timing"] == 0  # recorded even when nothing compiled (eager here)
    rows = [line.split() for line in captured.out.splitlines() if line.startswith("prompt-lookup")]
    assert rows and all(any(re.fullmatch(r"\d+\.\d{3}x", cell) for cell in row) for row in rows)  # speedups
    assert "speedup needs a vanilla result" not in captured.out and "ran without vanilla" not in captured.out

    # a second method with the same settings reuses those vanilla results instead of rerunning them
    before = vanilla.read_text()
    assert main(["run", "--plugin", plugin, "--method", "prompt-lookup", "-o", "ngram=2", "--out",
                 str(out.parent / "pl2.jsonl"), "--limit", "1", *QUICK]) == 0
    captured = capsys.readouterr()
    assert f"vanilla results with the same settings in {vanilla}" in captured.err
    assert vanilla.read_text() == before
    assert [line for line in captured.out.splitlines() if line.startswith("prompt-lookup") and "x" in line]
    assert "note: prompt-lookup ran without vanilla on some or all of its questions: its speedup is partly " \
        "against vanilla timed in an earlier run" in captured.out  # a ratio across two runs says so

    # other settings (here more questions) resume the same file for the missing ones only
    assert main(["run", "--plugin", plugin, "--method", "prompt-lookup", "--out", str(out.parent / "pl3.jsonl"),
                 "--limit", "2", *QUICK]) == 0
    assert [r.question_id for r in read_results(vanilla)[1]][:1] == [recs[0].question_id]
    assert len(read_results(vanilla)[1]) == 2
    # its first question ran alone (vanilla's file held it), the second beside vanilla: not every record was
    assert read_results(out.parent / "pl3.jsonl")[0]["compared_with"] == ["prompt-lookup"]
    assert "note: prompt-lookup ran without vanilla" in capsys.readouterr().out

    # resuming the first file with nothing to add keeps its vanilla; adding a question without vanilla (the file
    # beside it now holds both) makes its ratio span two runs, and its header and the summary say so
    for limit, beside in (("1", ["vanilla", "prompt-lookup"]), ("2", ["prompt-lookup"])):
        assert main(["run", "--plugin", plugin, "--method", "prompt-lookup", "--out", str(out), "--resume",
                     "--limit", limit, *QUICK]) == 0
        assert read_results(out)[0]["compared_with"] == beside
        assert ("note: prompt-lookup ran without vanilla" in capsys.readouterr().out) == (limit == "2")
    assert len(read_results(out)[1]) == 2


def test_a_resumed_header_adds_up_the_graphs_compiled_while_timing_its_records(tmp_path):
    out = tmp_path / "v.jsonl"
    meta = {"method": "vanilla", "model": "m", "compared_with": ["vanilla"]}

    def record(qid):
        turn = Generation([1], [Round(0, 0, 0.0, 0.1, 0.0)], 0.1, "length")
        return QuestionResult(qid, "qa", "qa", "vanilla", ["q"], [turn], [False], 0, [[0.1]])

    first = ResultWriter(out, meta)
    first.append(record(1))
    first.update_meta(graphs_compiled_while_timing=2)
    idle = ResultWriter(out, {**meta, "command": "idle"}, resume=True)
    idle.update_meta(graphs_compiled_while_timing=3)  # its process compiled 3 while timing others, none of this file's
    assert read_results(out)[0]["graphs_compiled_while_timing"] == 2
    more = ResultWriter(out, {**meta, "command": "more"}, resume=True)
    more.append(record(2))
    more.update_meta(graphs_compiled_while_timing=1)
    header, records = read_results(out)
    assert header["graphs_compiled_while_timing"] == 3 and header["resumed"] == ["idle", "more"] and len(records) == 2


def test_baseline_none_runs_the_method_alone(capsys, tmp_path):
    out = tmp_path / "pl.jsonl"
    assert main(["run", "--plugin", str(plugin_example(tmp_path)), "--method", "prompt-lookup", "--out", str(out),
                 "--baseline", "none", "--limit", "1", *QUICK]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["pl.jsonl"]
    assert "speedup needs a vanilla result" in capsys.readouterr().out


def test_a_misspelt_hook_is_a_one_line_error(capsys, tmp_path):
    typo = tmp_path / "typo.py"
    typo.write_text("from specharness.hookspecs import hookimpl\n"
                    "@hookimpl\n"
                    "def specharness_drafter():\n"  # the hook is specharness_drafters
                    "    return []\n")
    err = error_line(capsys, ["list", "--plugin", str(typo)])
    assert "specharness_drafter" in err and "specharness_drafters" in err


def test_round_observers_get_their_context(capsys, tmp_path):
    seen = tmp_path / "seen.txt"
    watcher = tmp_path / "watcher.py"
    watcher.write_text("from specharness.hookspecs import hookimpl\n"
                       f"OUT = {str(seen)!r}\n"
                       "@hookimpl\n"
                       "def specharness_round(record, context):\n"
                       "    with open(OUT, 'a') as fh:\n"
                       "        fh.write(f'{context.method} {context.question_id} {context.turn} {record.drafted}\\n')\n")
    assert main(["run", "--plugin", str(watcher), "--subtasks", "multi_turn", "--limit", "1", "--max-new-tokens", "3",
                 "--warmup", "0", "--repeats", "1", "--out", str(tmp_path / "v.jsonl")]) == 0
    rows = [line.split() for line in seen.read_text().splitlines()]
    qid = str(read_results(tmp_path / "v.jsonl")[1][0].question_id)
    assert {(m, q) for m, q, *_ in rows} == {("vanilla", qid)}
    assert sorted({int(t) for _, _, t, _ in rows}) == [0, 1]  # both turns of the MT-bench question


def test_built_in_methods_register_through_entry_points():
    from importlib.metadata import entry_points

    from specharness.plugins import GROUP, build_registry
    modules = {ep.value for ep in entry_points(group=GROUP)}
    assert {"specharness.verify", "specharness.methods.vanilla", "specharness.methods.kangaroo.plugin",
            "specharness.methods.medusa.plugin", "specharness.methods.oracle.plugin"} <= modules
    registered = {name for name, _ in build_registry().pm.list_name_plugin()}
    assert {ep.name for ep in entry_points(group=GROUP)} <= registered


def test_profile_methods_narrows_what_is_profiled():
    from specharness.cli.profile import profiled
    registry = build_registry()
    assert set(profiled(registry, "", [], [])) == set(registry.methods)
    got = profiled(registry, "vanilla,sam", ["sam:fallback=none"], ["sam.k=3"])
    assert got == {"vanilla": ("vanilla", []), "sam": ("sam", ["k=3"]), "sam:fallback=none": ("sam", ["fallback=none"])}


def test_a_method_that_raises_is_one_line_and_a_run_that_kept_nothing_starts_again(capsys, tmp_path):
    """A plugin's drafter raising mid-run: one line naming the method and the question, the traceback
    in a file; files it left empty do not block the next run."""
    plugin = tmp_path / "boom.py"
    plugin.write_text("from specharness.hookspecs import DrafterSpec, hookimpl\n"
                      "class D:\n    exit_layer = 0\n    def begin(self, state, h): pass\n"
                      "    def propose(self, state): raise RuntimeError('propose exploded')\n"
                      "    def commit(self, state, acc): pass\n"
                      "@hookimpl\ndef specharness_drafters():\n"
                      "    return [DrafterSpec('boom', lambda target, options: D(), options=[], help='raises')]\n")
    out = tmp_path / "r" / "boom.jsonl"
    capsys.readouterr()
    assert main(["run", "--plugin", str(plugin), "--method", "boom", "--limit", "1", "--out", str(out),
                 "--engine", "quick", *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the run's own progress lines
    assert err.startswith("specharness: error: ")
    assert "method 'boom' on question" in err and "raised RuntimeError: propose exploded" in err
    assert "no question had finished, so nothing was kept" in err
    kept = Path(re.search(r"traceback in (\S+)\)", err).group(1))
    assert "propose exploded" in kept.read_text() and "Traceback" in kept.read_text()
    assert out.read_text() == ""
    assert main(["run", "--method", "pld", "--limit", "1", "--out", str(out), "--engine", "quick", *QUICK]) == 0
    assert len(raw_records(out)) == 1  # started afresh, not refused as "already exists"

    plugin.write_text("x = 1\n")
    assert "implements no specharness hook" in error_line(capsys, ["list", "--plugin", str(plugin)])


def test_bad_report_inputs_are_one_line(capsys, tmp_path):
    """A profile that is not one, a report plugin that raises or returns no sections, a header whose
    temperature is not a number, a record whose token counts are not numbers."""
    d = tmp_path / "r"
    assert main(["run", "--limit", "1", "--out", str(d / "v.jsonl"), "--engine", "quick", *QUICK]) == 0
    assert "--out '/proc/self/status' is a file; this writes a folder" in error_line(
        capsys, ["report", str(d), "--out", "/proc/self/status"])
    assert "cannot write into --out '/proc/nope'" in error_line(capsys, ["report", str(d), "--out", "/proc/nope"])
    (tmp_path / "p.json").write_text('{"a": 1}')
    assert "is not a specharness profile" in error_line(capsys, ["report", str(d), "--profile", str(tmp_path / "p.json"),
                                                                 "--out", str(tmp_path / "o")])
    (tmp_path / "p.json").write_text("{torn")
    assert "cannot be read (JSONDecodeError" in error_line(capsys, ["report", str(d), "--profile",
                                                                    str(tmp_path / "p.json"), "--out", str(tmp_path / "o")])
    plugin = tmp_path / "sec.py"
    plugin.write_text("from specharness.hookspecs import hookimpl\n"
                      "@hookimpl\ndef specharness_report_sections(runs):\n    raise RuntimeError('no sections today')\n")
    err = error_line(capsys, ["report", str(d), "--plugin", str(plugin), "--out", str(tmp_path / "o")])
    assert f"report plugin 'plugin:{plugin}' raised RuntimeError: no sections today" in err
    plugin.write_text("from specharness.hookspecs import hookimpl\n"
                      "@hookimpl\ndef specharness_report_sections(runs):\n    return [42]\n")
    assert "returned int '42', not a section" in error_line(capsys, ["report", str(d), "--plugin", str(plugin),
                                                                     "--out", str(tmp_path / "o")])
    line = (d / "v.jsonl").read_text()
    record = json.loads(line)
    record["choices"][0]["new_tokens"] = ["6"]
    (d / "v.jsonl").write_text(json.dumps(record) + "\n")
    assert "its 'new_tokens' is ['6'], not a list of numbers" in error_line(capsys, ["report", str(d),
                                                                                     "--out", str(tmp_path / "o")])
    (d / "v.jsonl").write_text(line)
    meta = json.loads(meta_path(d / "v.jsonl").read_text())
    meta_path(d / "v.jsonl").write_text(json.dumps({**meta, "temperature": "hot"}))
    assert "'temperature' is 'hot', not a number" in error_line(capsys, ["report", str(d), "--out", str(tmp_path / "o")])


def test_profile_refuses_what_the_model_cannot_hold_and_an_unfinished_profile(capsys, tmp_path):
    (tmp_path / "profile.json").write_text('{"complete": false, "configs": []}')
    assert "stopped before its engine configurations were measured" in error_line(
        capsys, ["profile", "--drafters-only", "--out", str(tmp_path)])
    capsys.readouterr()
    assert main(["profile", "--configs", "float32/none", "--widths", "9000", "--contexts", "16", "--prefills", "8",
                 "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the bandwidth it measured first
    assert "--contexts 16 + --widths 9000" in err and "positions exceed the 8192" in err


def test_a_cache_that_cannot_be_a_folder_is_named(capsys, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("SPECHARNESS_CACHE", str(tmp_path / "afile"))
    assert f"$SPECHARNESS_CACHE '{tmp_path / 'afile'}' cannot be a folder" in error_line(capsys, ["run", *QUICK])


def test_list_into_a_closed_pipe_is_quiet():
    import subprocess
    import sys
    done = subprocess.run(f"{sys.executable} -m specharness list | head -1", shell=True, capture_output=True,
                          text=True, cwd=ROOT)
    assert done.stdout.strip() and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
