"""python -m specharness report RESULT_FILES... --out DIR: paper-style tables and figures.

Everything comes from result files (``RUN.jsonl`` + ``RUN.meta.json``); no model is loaded and no
method plugin is imported. ``runs.py`` decides which file is what, ``tables.py`` and ``figures.py``
build the generic sections, a method adds its own through the ``specharness_report_sections`` hook
(entry-point group ``specharness.report``: light modules, e.g. Kangaroo's sweeps and ablation), and
``render.py`` writes Markdown, LaTeX, PNG and PDF. A section without data is skipped with a one-line
note, never an error.
"""

from __future__ import annotations

from pathlib import Path

from .. import stats
from ..costmodel import Profile
from ..errors import UsageError
from ..tasks.specbench import SUBTASKS
from . import figures, scaling, tables
from .render import Writer
from .runs import Run, select_runs
from .sections import Section

DEFINITIONS = (
    "Definitions: speedup = vanilla time / method time on the same questions (throughput ratio), "
    "95% paired BCa bootstrap over questions, a question's time = median over its timed repeats; "
    "CR = generated tokens / target forwards; CTAR(w) = fraction of verification rounds with at "
    "least w accepted draft tokens (= the paper's I(s_k - w > 0) with s_k counting the bonus "
    "token); break-even acceptance = draft seconds per drafted token / seconds of a vanilla step "
    "(draft cost) or (round cost / vanilla step - 1) / mean draft length (full round cost).\n")


def method_sections(runs: list[Run], plugins: list[str]) -> list[Section]:
    """Sections the methods contribute (entry-point group ``specharness.report`` and --plugin)."""
    from ..plugins import REPORT_GROUP, check_hooks, entry_point_plugins, load_plugin, new_manager
    pm = new_manager()
    for name, module in entry_point_plugins(REPORT_GROUP, required=False):
        pm.register(module, name=name)
    for ref in plugins:
        module = load_plugin(ref)
        if not pm.is_registered(module):
            pm.register(module, name=f"plugin:{ref}")
    check_hooks(pm)
    return [s for sections in pm.hook.specharness_report_sections(runs=runs) for s in sections or []]


def build_report(paths: list[str | Path], out: str | Path, plugins: list[str] | None = None,
                 ctar_subtask: str = "math_reasoning", profile: str | Path | None = None) -> Writer:
    import matplotlib
    matplotlib.use("Agg")
    runs = select_runs(paths)
    writer = Writer(Path(out))
    for build in (tables.table1, tables.detail, tables.identity, tables.paired_tests, tables.acceptance,
                  tables.cost_model, tables.hardware):
        for section in build(runs):
            writer.add(section)
    if profile:
        for section in tables.cost_model_profile(runs, Profile.load(profile)):
            writer.add(section)
    for section in [*figures.fig1a(runs, ctar_subtask), *figures.fig1b(runs), *scaling.data_scaling(runs),
                    *method_sections(runs, plugins or [])]:
        writer.add(section)
    inputs = "\n".join(f"- `{r.path}`: {r.label}, {len(r.records)} questions"
                       + (f", baseline `{r.baseline.path.name}`" if r.baseline and not r.is_vanilla else "")
                       + (" (main)" if r.main else "") for r in runs)
    unstable = [(r.label, stats.unstable_timings(r.records)) for r in runs]
    stab = "\n".join(f"- {lab}: {len(s.unstable)}/{s.questions} questions with CV > {stats.CV_LIMIT:.0%} "
                     f"(max {s.max_cv:.1%}, {s.repeats} repeats)" for lab, s in unstable if s.unstable)
    head = ["# specharness report\n", DEFINITIONS, "## Inputs\n", inputs + "\n"]
    if stab:
        head += ["## Unstable timings\n", stab + "\n"]
    writer.finish(head, [str(r.path) for r in runs])
    return writer


def add_report_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="paper-style tables and figures from result files (no model needed)",
        description="Table 1 (speedup with 95% CI and CR per subtask), detail, greedy identity, paired tests, "
                    "acceptance and cost, Figure 1(a) CTAR curves, 1(b) speedup bars, and each method's own "
                    "sections (Kangaroo: Table 2 ablation, 3(a) exit-layer sweep, 3(b) eta sweep with the oracle "
                    "stop, best eta per subtask); Markdown, LaTeX, PNG and PDF.")
    p.add_argument("results", nargs="+", metavar="RESULT_FILE_OR_DIR",
                   help="result files (.jsonl with its .meta.json) or directories holding them")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--ctar-subtask", default="math_reasoning", help="subtask of Figure 1(a) (default: %(default)s)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="plugin contributing report sections (repeatable)")
    p.add_argument("--profile", default=None, metavar="PROFILE.json",
                   help="an engine profile ('specharness profile'): predict each file's speedup from it")


def cmd_report(args) -> int:
    if args.ctar_subtask not in SUBTASKS:
        raise UsageError(f"unknown subtask '{args.ctar_subtask}'; choose from {', '.join(SUBTASKS)}")
    if args.profile and not Path(args.profile).is_file():
        raise UsageError(f"profile '{args.profile}' does not exist; make one with 'python -m specharness profile'")
    writer = build_report(args.results, args.out, args.plugin, args.ctar_subtask, args.profile)
    print(f"wrote {len(writer.made)} files to {writer.out}: {', '.join(writer.made)}")
    return 0
