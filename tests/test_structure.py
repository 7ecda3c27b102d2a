"""The shape of the code: imports run one way, the report needs no method plugin, the README's
layout section matches the tree, and the committed results rebuild the same tables."""

from __future__ import annotations

import ast
import filecmp
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the folders and the import names they install under (pyproject.toml's package-dir)
PACKAGES = {"specharness": ROOT / "specharness", "specharness.methods": ROOT / "methods",
            "specharness.tasks": ROOT / "tasks"}


def project_modules() -> dict[str, Path]:
    out = {}
    for prefix, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([prefix, *parts])] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module ``name`` imports, wherever the import stands (in a function, under
    TYPE_CHECKING): an import hidden in a function to dodge a cycle is still a cycle."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name:
                found.add(t)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_cycles():
    modules = project_modules()
    assert "specharness.methods.kangaroo.plugin" in modules and "specharness.tasks.specbench" in modules
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert "specharness.methods.kangaroo.drafter" in graph["specharness.methods.kangaroo.plugin"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_function_level_imports(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import pkg.b\n")
    b.write_text("def f():\n    from pkg import a\n")
    modules = {"pkg.a": a, "pkg.b": b}
    graph = {n: imports_of(n, p, modules) for n, p in modules.items()}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


BLOCK_METHODS = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "specharness.methods" or name.startswith("specharness.methods."):
            raise ImportError(f"blocked for the test: {name}")
sys.meta_path.insert(0, Block())
from specharness.cli import main
sys.exit(main(["report", sys.argv[1], "--out", sys.argv[2]]))
"""


def test_report_runs_with_no_method_plugin_importable(tmp_path):
    from fixture_results import write_fixture
    write_fixture(tmp_path / "runs", per_subtask=2)
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-c", BLOCK_METHODS, str(tmp_path / "runs"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "blocked for the test: specharness.methods" in proc.stderr  # Kangaroo's sections said left out
    for name in ("table1.md", "detail.md", "acceptance.md", "fig1b_speedup.png", "report.md"):
        assert (out / name).is_file(), name
    assert not (out / "table2.md").exists()  # a method's own section needs its plugin


def test_readme_layout_matches_the_tree():
    """Every path the README's layout section names exists, and every module of the framework and
    every method package is named there."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Layout\n\n```\n(.*?)```", text, re.S).group(1)
    named = set(re.findall(r"[\w./-]+\.py", block)) | set(re.findall(r"^\s*([\w-]+/)", block, re.M))
    tree = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if ".git" not in p.parts}
    for entry in named:
        name = entry.rstrip("/")
        assert any(t == name or t.endswith("/" + name) for t in tree), f"README layout names '{entry}', which does not exist"
    words = set(re.findall(r"[\w.]+", block))
    for path in sorted((ROOT / "specharness").rglob("*.py")):
        if path.name != "__init__.py":
            assert path.stem in words or path.name in words, f"README layout does not mention {path.relative_to(ROOT)}"
    for pkg in sorted(p for p in (ROOT / "methods").iterdir() if (p / "__init__.py").is_file()):
        assert pkg.name in words, f"README layout does not mention methods/{pkg.name}"


# a folder's report, or a stage's in its own subfolder (results/<run>/<stage>/report), rebuilt from its folder
# (and from the folder's stages that have no report of their own)
# (report-*: the same runs' report against another profile, named by its run.sh's report command)
COMMITTED = sorted(p.parent for p in [*ROOT.glob("results/*/report*/table1.md"), *ROOT.glob("results/*/*/report/table1.md")])


def profile_named(report_dir: Path) -> Path:
    """The profile a report was built with: the ``--profile`` of the run.sh (the run's, or a stage's run's)
    report command that writes this folder, else its first."""
    run_sh = next(d / "run.sh" for d in (report_dir.parent, report_dir.parent.parent) if (d / "run.sh").exists())
    commands = [c for c in run_sh.read_text().replace("\\\n", " ").splitlines() if "--profile " in c]
    mine = [c for c in commands if re.search(rf"--out \S*/{re.escape(report_dir.name)}\"?(\s|$)", c)]
    named = re.search(r"--profile (\S+)", (mine or commands)[0]).group(1).strip('"')
    return ROOT / named.replace("$OUT", run_sh.parent.relative_to(ROOT).as_posix())  # run.sh's own folder


@pytest.mark.parametrize("report_dir", COMMITTED,
                         ids=[p.relative_to(ROOT / "results").as_posix().removesuffix("/report") for p in COMMITTED])
def test_committed_results_rebuild_the_same_tables(report_dir, tmp_path):
    from specharness.report import build_report
    # a report built with --profile used the profile its run.sh names
    profile = profile_named(report_dir) if (report_dir / "cost_model_profile.md").exists() else None
    # a stage without a report of its own (its own vanilla, its own command) is read with its parent folder
    stages = sorted(d for d in report_dir.parent.iterdir()
                    if d.is_dir() and any(d.glob("*.meta.json")) and not (d / "report").exists())
    build_report([report_dir.parent, *stages], tmp_path, profile=profile)
    tables = sorted(p.name for p in report_dir.glob("*.md") if p.name != "report.md") + sorted(
        p.name for p in report_dir.glob("*.tex"))
    assert tables
    differ = [name for name in tables if not filecmp.cmp(report_dir / name, tmp_path / name, shallow=False)]
    assert not differ, f"{report_dir}: rebuilt tables differ: {differ}"


# the modules that may read the environment, and why: nothing else does (engine switches are
# EngineOptions fields, read once in engine_options.py and passed in)
ENV_READERS = {
    "specharness.engine_options": "every engine switch",
    "specharness.paths": "$SPECHARNESS_CACHE, where built things are kept",
    "specharness.tasks.specbench": "$SPECHARNESS_SPECBENCH(_URL), where the questions are",
    "specharness.model.accel.narrow_attention": "puts pip's ninja on PATH for torch's extension build",
}


def _environ_uses(tree: ast.AST) -> list[ast.AST]:
    """Every ``os.environ`` / ``os.getenv`` / ``environ`` reference in a module."""
    return [n for n in ast.walk(tree) if (isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv"))
            or (isinstance(n, ast.Name) and n.id in ("environ", "getenv"))]


def _code_strings(tree: ast.AST) -> set[str]:
    """String constants that are not docstrings or comments (a docstring may name a variable)."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_only_the_engine_options_module_reads_engine_switches_from_the_environment():
    from specharness import engine_options as eo
    switches = {v for k, v in vars(eo).items() if k.endswith("_ENV") and isinstance(v, str)} | set(eo.INDUCTOR_TABLES_ENV)
    assert {eo.PIN_ENV, eo.AOT_ENV, eo.NARROWEST_ENV, eo.WIDE_AUTOTUNE_ENV} <= switches
    for name, path in project_modules().items():
        tree = ast.parse(path.read_text())
        if name != "specharness.engine_options":
            named = sorted(s for s in _code_strings(tree) if s in switches or s.startswith("TORCHINDUCTOR_"))
            assert not named, f"{name} names the engine switch(es) {named}: read them as EngineOptions fields"
        if name not in ENV_READERS:
            assert not _environ_uses(tree), f"{name} reads the environment; only {sorted(ENV_READERS)} may"
    assert _environ_uses(ast.parse((ROOT / "specharness" / "engine_options.py").read_text()))


def test_the_environment_check_sees_a_switch_read_elsewhere(tmp_path):
    bad = ast.parse('import os\nX = os.environ.get("SPECHARNESS_CPP_WRAPPER", "1")\n')
    assert _environ_uses(bad) and "SPECHARNESS_CPP_WRAPPER" in _code_strings(bad)
    doc = ast.parse('"""set SPECHARNESS_CPP_WRAPPER=0 to switch it off"""\n')
    assert not _code_strings(doc) and not _environ_uses(doc)


def test_methods_import_the_contract_not_the_engine_or_model_internals():
    """A method plugin proposes tokens: it imports ``specharness.api`` (and the model's public
    package), never the engine loop or a module inside ``specharness.model``."""
    modules = project_modules()
    drafters = 0
    for name, path in modules.items():
        if not name.startswith("specharness.methods."):
            continue
        deps = imports_of(name, path, modules)
        inner = sorted(d for d in deps if d == "specharness.engine" or d.startswith("specharness.model."))
        assert not inner, f"{name} imports {inner}: use specharness.api and specharness.model's public names"
        if re.search(r"\b(Proposal|DecodeState|Verified)\b", path.read_text()):
            drafters += 1
            assert "specharness.api" in deps, f"{name} uses the plugin contract but does not import specharness.api"
    assert drafters >= 8  # every drafter module was looked at


def test_every_results_folder_has_a_readme():
    folders = sorted(p for p in (ROOT / "results").iterdir() if p.is_dir())
    assert folders
    missing = [p.name for p in folders if not (p / "README.md").is_file()]
    assert not missing, f"results folders without a README.md: {missing}"


def test_the_readme_is_for_users():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 350, f"README.md has {n} lines; experiment notes go in results/<run>/README.md, internals in docs/"
