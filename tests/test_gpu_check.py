"""The GPU check, here on CPU: its dry run runs every stage and brings back the output folder a GPU
machine would (at most 8 files), and its identity stage fails a deliberately broken method; bad
arguments are one line; the profile merge, the summary of a GPU run and the weights' transfer in
parts are checked on made-up inputs. Nothing here asserts a speed."""

from __future__ import annotations

import json
import math
import subprocess
import tarfile
from pathlib import Path

import pytest

from specharness import gpu_check
from specharness.records import QuestionRecord

ROOT = Path(__file__).resolve().parents[1]

BROKEN = '''"""Broken on purpose: greedy decoding with its second token changed."""
from specharness.hookspecs import DecoderSpec, hookimpl
from specharness.records import Generation, Round


def build(target, options):
    def decode(prompt_ids, max_new_tokens, temperature, seed):
        tokens = target.greedy_continuation(list(prompt_ids), max_new_tokens)
        if len(tokens) > 1:
            tokens[1] = (tokens[1] + 1) % target.vocab_size
        return Generation(tokens, [Round(0, 0, 0.0, 0.0, 0.0, width=len(prompt_ids))], 1e-3, "length")
    return decode


@hookimpl
def specharness_decoders():
    return [DecoderSpec("corrupt", build, help="BROKEN: changes the second token")]
'''


@pytest.mark.slow  # a minute; run it before a GPU session's one prepared call (docs/gpu.md)
def test_dry_run_brings_back_every_stage_and_fails_a_broken_method(tmp_path):
    plugin = tmp_path / "corrupt.py"
    plugin.write_text(BROKEN)
    out, work = tmp_path / "out", tmp_path / "work"
    methods = ",".join([*gpu_check.IDENTITY_METHODS, "corrupt"])
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--device", "cpu", "--dry-run", "--out",
                           str(out), "--work", str(work), "--methods", methods, "--plugin", str(plugin)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # identity failed: the broken method
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(gpu_check.OUT_FILES) and len(files) <= 8
    assert all(p.is_file() and p.stat().st_size < 16 << 20 for p in out.iterdir())

    check = json.loads((out / "check.json").read_text())
    assert {s["stage"]: s["status"] for s in check["stages"]} == {
        "identity": "ok", "profile-eager": "ok", "profile-compiled": "skipped", "compare": "ok", "margins": "ok"}
    assert check["verdict"] == "NEEDS A LOOK" and not check["problems"]

    identity = json.loads((out / "identity.json").read_text())
    assert identity["complete"] and not identity["passed"] and identity["dtype"] == "float32"
    for label in gpu_check.IDENTITY_METHODS:
        row = identity["methods"][label]
        assert row["passed"] and row["identical"] == row["turns"] >= 1, label
    broken = identity["methods"]["corrupt"]
    assert not broken["passed"] and broken["divergences"][0]["position"] == 1
    assert broken["divergences"][0]["kind"] == "divergence" and broken["divergences"][0]["method_gap"] > 1e-4

    profile = json.loads((out / "profile.json").read_text())
    assert [(r["dtype"], r["compile"]) for r in profile["configs"]] == [("float32", "none")]
    assert profile["rooflines"]["float32"]["ms"] > 0 and profile["hf_generate"]["float32"]["step_ms"] > 0
    assert profile["chosen"] == {"dtype": "float32", "compile": "none"} and profile["complete"]
    assert "roofline" in (out / "profile.md").read_text()

    compare = check["compare"]
    assert {r["method"] for r in compare["rows"]} == set(gpu_check.COMPARE_METHODS)
    for label, against in compare["identity"].items():  # float32 eager: every method is vanilla's tokens
        assert all(v["identical"] == v["turns"] >= 1 for v in against.values()), label
    with tarfile.open(out / "compare-results.tar.gz") as tar:
        names = tar.getnames()
    for method in gpu_check.COMPARE_METHODS:
        assert any(n.startswith(f"compare/{method}-") and n.endswith(".jsonl") for n in names), method
        assert any(n.startswith(f"compare/{method}-") and n.endswith(".meta.json") for n in names), method

    summary = (out / "summary.md").read_text()
    assert "| corrupt | 0/1 |" in summary and "FAILED" in summary and "NEEDS A LOOK" in summary
    assert "== stage margins: ok" in (out / "log.txt").read_text()


def _one_line_error(capsys, argv: list[str]) -> str:
    from specharness.cli import main
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specharness: error:") and len(err.splitlines()) == 1, err
    return err


def test_bad_arguments_are_one_line(capsys, tmp_path):
    import torch
    out = ["--out", str(tmp_path / "out")]
    assert "unknown --device" in _one_line_error(capsys, ["gpu-check", "--device", "tpu", *out])
    if not torch.cuda.is_available():
        assert "no CUDA device" in _one_line_error(capsys, ["gpu-check", *out])
    if not torch.cuda.is_available():  # a wrong argument is named before the missing GPU
        assert "unknown stage 'nope'" in _one_line_error(capsys, ["gpu-check", *out, "--stages", "nope"])
    cpu = ["--device", "cpu", *out]
    assert "more than this machine's" in _one_line_error(capsys, ["gpu-check", *cpu, "--threads", "100000"])
    assert "--budget" in _one_line_error(capsys, ["gpu-check", *cpu, "--budget", "0"])
    assert "nosuch" in _one_line_error(capsys, ["gpu-check", *cpu, "--methods", "vanilla,nosuch"])
    assert "does not exist" in _one_line_error(capsys, ["gpu-check", *cpu, "--model", str(tmp_path / "no.gguf")])
    assert "--threads" in _one_line_error(capsys, ["gpu-check", *cpu, "--threads", "0"])
    assert "unknown stage 'compile'" in _one_line_error(capsys, ["gpu-check", *cpu, "--stages", "identity,compile"])
    assert "--stages is empty" in _one_line_error(capsys, ["gpu-check", *cpu, "--stages", ","])
    assert "ask for compare too" in _one_line_error(capsys, ["gpu-check", *cpu, "--stages", "identity,margins"])
    assert "runs nothing" in _one_line_error(capsys, ["gpu-check", *cpu, "--dry-run", "--stages", "profile-compiled"])
    assert "--work" in _one_line_error(capsys, ["gpu-check", "--stage", "identity"])
    assert "config.json" in _one_line_error(capsys, ["gpu-check", "--stage", "identity", "--work", str(tmp_path)])
    (tmp_path / "config.json").write_text("{}")
    assert "unknown stage" in _one_line_error(capsys, ["gpu-check", "--stage", "nope", "--work", str(tmp_path)])
    assert "not empty" in _one_line_error(capsys, ["gpu-check", *cpu, "--work", str(tmp_path)])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert "other files" in _one_line_error(capsys, ["gpu-check", *cpu])


def _part(dtype: str, mode: str, steps: dict[str, float], roof: float, gen: float, gbs: float) -> dict:
    return {"command": f"profile {dtype}/{mode}", "bandwidth_gbs": gbs, "gpu": "NVIDIA H200", "cpu": "x", "model": "m",
            "threads": 16, "torch": "2.11", "created": "now",
            "configs": [{"dtype": dtype, "compile": mode, "by_width": {"256": steps, "1024": steps},
                         "amx_prefetch": False, "cpp_wrapper": False, "narrow_attention": False}],
            "rooflines": {dtype: {"ms": roof, "weight_bytes": 1}}, "hf_generate": {dtype: {"step_ms": gen}}}


def test_profile_parts_merge_and_the_fastest_is_chosen():
    eager = _part("bfloat16", "none", {"1": 4.0, "8": 4.4, "32": 5.0, "64": 6.0}, 0.07, 12.0, 4300)
    compiled = _part("bfloat16", "default", {"1": 0.8, "8": 0.9, "32": 1.2, "64": 1.6}, 0.08, 13.0, 4200)
    merged = gpu_check.merge_profiles([eager, compiled])
    assert [(r["dtype"], r["compile"]) for r in merged["configs"]] == [("bfloat16", "none"), ("bfloat16", "default")]
    assert merged["chosen"] == {"dtype": "bfloat16", "compile": "default"}
    assert merged["rooflines"]["bfloat16"]["ms"] == 0.07 and merged["hf_generate"]["bfloat16"]["step_ms"] == 12.0
    assert [p["bandwidth_gbs"] for p in merged["parts"]] == [4300, 4200]
    head = {r["compile"]: r for r in gpu_check.profile_headline(merged)}["default"]
    assert math.isclose(head["step_over_roofline"], 0.8 / 0.07) and math.isclose(head["w8_over_w1"], 0.9 / 0.8)
    assert math.isclose(head["generate_over_engine"], 12.0 / 0.8) and not any(head["cpu_only"].values())


def test_the_summary_of_a_gpu_run_names_the_gpu_and_its_ratios():
    merged = gpu_check.merge_profiles([_part("bfloat16", "default", {"1": 0.8, "8": 0.9, "32": 1.2, "64": 1.6},
                                             0.07, 12.0, 4300)])
    check = {"config": {"model": "smollm2", "device": "cuda", "dry_run": False, "budget_s": 450.0,
                        "sizes": {"compare_limit": 2, "compare_repeats": 2, "compare_tokens": 64}},
             "stages": [{"stage": "identity", "status": "ok", "seconds": 60.0, "limit_s": 100.0}],
             "environment": {"gpu": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "transformers": "5.17.0"},
             "verdict": "passed", "git_commit": "abc", "command": "python -m specharness gpu-check",
             "profile": {"gpu": "NVIDIA H200", "bandwidth_gbs": 4300.0, "bandwidth_method": "copy",
                         "chosen": merged["chosen"]},
             "profile_headline": gpu_check.profile_headline(merged),
             "compare": {"engine": {"dtype": "bfloat16", "compile": "default"}, "chosen_from": "profile",
                         "rows": [{"method": "eagle", "subtask": "overall", "questions": 12, "tokens_per_s": 300.0,
                                   "cr": 1.5, "speedup_ci": [1.2, 1.1, 1.3]}],
                         "identity": {"eagle": {"vs_vanilla": {"turns": 14, "identical": 13}}},
                         "vanilla_forward_ms": 2.4, "profile_step_ms": 0.8}}
    text = gpu_check.render_summary(check)
    assert "on NVIDIA H200" in text and "4300 GB/s" in text and "| 11.43 |" in text  # step / roofline
    assert "1.20x [1.10, 1.30]" in text and "| 13/14 |" in text and "ratio 3.00" in text and "CUDA graphs" in text


def _record(qid, turns):
    return QuestionRecord(qid, "qa", token_ids=turns)


def test_token_identity_stops_at_a_questions_first_divergence_and_limits_add_up():
    ref = [_record(1, [[1, 2, 3], [4, 5]]), _record(2, [[7, 8]])]
    got = [_record(1, [[1, 9, 3], [4, 5]]), _record(2, [[7, 8]])]
    res = gpu_check.token_identity(got, ref)
    assert res["turns"] == 2 and res["identical"] == 1 and res["not_compared"] == 1
    assert res["divergences"] == [{"question_id": 1, "subtask": "qa", "turn": 0, "position": 1}]
    assert gpu_check.first_difference([1, 2], [1, 2, 3]) == 2
    limits = gpu_check.stage_limits(list(gpu_check.STAGES), gpu_check.BUDGET_S)
    assert math.isclose(sum(limits), gpu_check.BUDGET_S) and all(x >= gpu_check.MIN_STAGE_S for x in limits)


def test_the_weights_travel_in_parts_and_come_back_whole(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(bytes(range(256)) * 12000)  # 3 MB
    pack, dest, script = tmp_path / "pack", tmp_path / "dest", str(ROOT / "scripts" / "gpu-pack.sh")
    run = lambda *args: subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=120)  # noqa: E731
    made = run("pack", "--gguf", str(gguf), "--name", "m.gguf", "--out", str(pack), "--part-size", "1000000",
               "--no-wheels")
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in pack.glob("part*")) == ["part00", "part01", "part02", "part03"]
    assert 'call 4: carry ["' in made.stdout and "gpu-check.sh --device cuda" in made.stdout
    one = tmp_path / "one"  # what the first device command carries: common/ and one part
    (one / "common").mkdir(parents=True)
    (one / "common" / "MANIFEST").write_text((pack / "common" / "MANIFEST").read_text())
    (one / "part00").write_bytes((pack / "part00").read_bytes())
    first = run("install", "--pack", str(one), "--dest", str(dest), "--no-pip")
    assert first.returncode == 3 and "1 of 4 parts" in first.stdout
    (pack / "part00").unlink()  # stashed by the first command: the last one need not carry it again
    last = run("install", "--pack", str(pack), "--dest", str(dest), "--no-pip")
    assert last.returncode == 0, last.stderr
    assert (dest / "m.gguf").read_bytes() == gguf.read_bytes()
    (dest / "part01").write_bytes(b"x")  # a bad part is caught by the size or the sha256
    (dest / "m.gguf").unlink()
    bad = run("install", "--pack", str(tmp_path / "none"), "--dest", str(dest), "--no-pip")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "gpu-pack/" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.slow  # ~30 s: a second lease runs only what the first could not finish
def test_a_subset_of_stages_shares_the_budget_and_passes_without_identity(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--device", "cpu", "--dry-run", "--out",
                           str(out), "--work", str(work), "--stages", "profile-eager", "--budget", "300"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = json.loads((out / "check.json").read_text())
    status = {s["stage"]: (s["status"], s.get("note", "")) for s in check["stages"]}
    assert status["profile-eager"][0] == "ok" and status["identity"] == ("skipped", "not asked for (--stages)")
    assert status["compare"] == ("skipped", "not asked for (--stages)") and check["verdict"] == "passed"
    assert math.isclose(next(s["limit_s"] for s in check["stages"] if s["stage"] == "profile-eager"), 300, rel_tol=0.05)
    assert not (out / "identity.json").exists() and json.loads((out / "profile.json").read_text())["configs"]


def test_the_compare_runs_in_the_fastest_eager_configuration(tmp_path):
    eager = _part("float32", "none", {"1": 20.0, "8": 21.0}, 0.13, 32.0, 4300)
    eager["configs"].append(_part("bfloat16", "none", {"1": 18.0, "8": 19.0}, 0.07, 30.0, 4300)["configs"][0])
    compiled = _part("bfloat16", "default", {"1": 0.8, "8": 0.9}, 0.07, 30.0, 4300)
    (tmp_path / "profile.json").write_text(json.dumps(gpu_check.merge_profiles([eager, compiled])))
    sizes = {"profile_eager": [["float32", "none"]]}
    assert gpu_check.chosen_config(tmp_path, sizes)[:2] == ("bfloat16", "none")  # not the compiled 0.8 ms
    (tmp_path / "profile.json").unlink()
    assert gpu_check.chosen_config(tmp_path, sizes)[:2] == ("float32", "none")


def test_an_interrupted_profile_renders_what_it_measured():
    from specharness.profile import markdown, ms_text
    part = _part("bfloat16", "none", {"1": 18.0, "8": 19.0}, 0.064, 30.0, 4300)
    part["command"] = "specharness profile"
    text = markdown(part)  # no "chosen": the profile stopped before its end
    assert "none yet" in text and "0.064 ms" in text and "| 18.0 |" in text
    assert ms_text(0.0642) == "0.064" and ms_text(14.44) == "14.4"


def test_a_profile_stopped_before_its_first_row_merges_and_renders_without_a_choice():
    """A part stopped before any row (its rooflines saved, no configuration measured) must not stop the
    check: the merge keeps its rooflines, chooses from the other part's rows or from none, and says
    it is incomplete."""
    empty = {**_part("bfloat16", "default", {"1": 0.8}, 0.07, 12.0, 4300), "configs": [], "complete": False}
    alone = gpu_check.merge_profiles([empty])
    assert "chosen" not in alone and not alone["complete"] and alone["rooflines"]["bfloat16"]["ms"] == 0.07
    eager = {**_part("float32", "none", {"1": 14.0, "8": 14.5}, 0.13, 18.0, 4200), "complete": True}
    both = gpu_check.merge_profiles([eager, empty])
    assert both["chosen"] == {"dtype": "float32", "compile": "none"} and not both["complete"]
    check = {"config": {"model": "smollm2", "device": "cuda", "dry_run": False, "budget_s": 240.0, "sizes": {}},
             "stages": [{"stage": "profile-compiled", "status": "timed out", "seconds": 230.0, "limit_s": 240.0}],
             "environment": {"gpu": "NVIDIA H200"}, "verdict": "NEEDS A LOOK",
             "profile": {"gpu": "NVIDIA H200", "bandwidth_gbs": 4300.0, "chosen": alone.get("chosen"),
                         "complete": alone["complete"]},
             "profile_headline": gpu_check.profile_headline(alone)}
    text = gpu_check.render_summary(check)
    assert "No configuration measured yet" in text and "INCOMPLETE" in text
