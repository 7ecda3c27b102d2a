"""Every ``python -m specharness`` command in the README runs as written, on a fresh cache.

Each command is taken from the README's code blocks (continuation lines joined, comments
dropped) and run through ``cli.main`` in an empty working directory with a few arguments appended
that only shrink the work (fewer questions and tokens, tiny training recipes, fixed sample sizes);
outputs go to that directory and the session's temporary cache, never into the repository. Later arguments override earlier ones, so what is
tested is the command as written, made small. Commands run in README order: ``train medusa`` comes
before the comparison that uses its heads, as it does for a reader following the README.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from specharness.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHRINK = {
    "run": ["--limit", "1", "--subtasks", "qa", "--max-new-tokens", "4", "--repeats", "1", "--warmup", "0"],
    "compare": ["--limit", "1", "--subtasks", "qa", "--max-new-tokens", "4", "--repeats", "1", "--warmup", "0"],
    "lossless": ["--subtasks", "qa", "--max-new-tokens", "8", "--samples-a", "300", "--samples-b", "100",
                 "--samples-c", "800", "--quiet"],
    "train": ["-o", "conversations=8", "-o", "max_answer_tokens=8", "-o", "epochs=1"],
    "profile": ["--configs", "float32/none", "--widths", "1,2", "--contexts", "32,64", "--prefills", "16",
                "-o", "self-spec.trials=2", "--tokens", "8", "--passes", "1"],
}


def readme_commands() -> list[str]:
    """``python -m specharness ...`` commands of the README, in order: lines of shell code blocks
    (continuations joined, the part after the last ``&&``) and inline code spans."""
    out, fence, text = [], None, README.read_text()
    lines = text.replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence in ("bash", "sh", ""):
            cmd = line.split("&&")[-1].strip()
            if cmd.startswith("python -m specharness "):
                out.append(" ".join(shlex.split(cmd, comments=True)[3:]))
        elif fence is None:
            out += [" ".join(shlex.split(c)[3:]) for c in re.findall(r"`(python -m specharness [^`]+)`", line)]
    return out


COMMANDS = readme_commands()


def test_the_readme_has_commands():
    assert len(COMMANDS) >= 10 and COMMANDS[0].startswith("run --method")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One empty working directory for all commands (so later ones see what earlier ones made)."""
    path = tmp_path_factory.mktemp("readme")
    code = re.search(r"<!-- plugin-example -->\s*```python\n(.*?)```", README.read_text(), re.S).group(1)
    (path / "prompt_lookup.py").write_text(code)  # the README's plugin, where its command expects it
    return path


def _argv(command: str, i: int, workdir: Path) -> list[str]:
    argv = shlex.split(command)
    sub = argv[0]
    extra = list(SHRINK.get(sub, []))
    if sub == "train":  # a trainer gets the shrinking options it has ('train draft-vocab' trains no epochs)
        from specharness.plugins import build_registry
        has = {o.name for o in build_registry().trainer(argv[1]).options}
        extra = [x for flag, opt in zip(extra[::2], extra[1::2]) if opt.split("=")[0] in has for x in (flag, opt)]
    if "self-spec" in argv and sub == "run":  # its one-time layer-skip search: 2 masks instead of 48
        extra += ["-o", "trials=2"]
    if "--workers" in argv:  # one 1-thread worker fits the 2-CPU local cluster the test starts
        extra += ["--workers", "1", "--threads", "1"]
    if sub == "report":  # committed result directories are read where they are; tables go to the work dir
        argv = [a if a.startswith("-") or (workdir / a).exists() or not (ROOT / a).exists() else str(ROOT / a)
                for a in argv]
        extra += ["--out", str(workdir / f"report-{i}")]
    return argv + extra


@pytest.mark.parametrize("i", range(len(COMMANDS)), ids=[c[:60] for c in COMMANDS])
def test_readme_command_runs_as_written(i, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    if "--executor ray" in COMMANDS[i]:  # the cluster '--address auto' finds: a local one, started here
        ray = pytest.importorskip("ray")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    threads = torch.get_num_threads()
    try:
        rc = main(_argv(COMMANDS[i], i, workdir))
    finally:
        torch.set_num_threads(threads)
    assert rc == 0, COMMANDS[i]
    if COMMANDS[i].startswith("profile"):  # every installed method has profiled costs for the cost model
        out = Path(shlex.split(COMMANDS[i])[shlex.split(COMMANDS[i]).index("--out") + 1])
        data = json.loads((workdir / out / "profile.json").read_text())
        from specharness.plugins import build_registry
        registry = build_registry()
        assert set(data["drafters"]) | set(data["decoders"]) | set(data["left_out"]) == set(registry.methods)
        assert set(data["left_out"]) <= {"medusa"}  # only medusa needs a checkpoint ('train medusa' runs first)
        assert set(data["decoders"]) == set(registry.decoders)
        assert data["decoders"]["hf-prompt-lookup"]["mean_drafted"] > 0  # the copy prompt gives it n-grams
        assert set(data["hf_generate"]["float32"]["by_width"]["32"]) == {"1", "2"}
        roof = data["rooflines"]["float32"]  # the width floor, beside the forwards it bounds
        assert set(roof["floor_ms"]) == set(roof["gemm_hot_ms"]) == {"1", "2"}
        assert roof["floor_ms"]["1"] >= roof["ms"] and data["git_commit"] and data["transformers"]
