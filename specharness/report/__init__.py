"""python -m specharness report RESULT_FILES... --out DIR: paper-style tables and figures.

Everything comes from result files (``RUN.jsonl`` + ``RUN.meta.json``); no model is loaded and no
method plugin is imported. ``runs.py`` decides which file is what, ``tables.py`` and ``figures.py``
build the generic sections (``looping.py``: the share of looping turns, Table 1 without them), a method adds its own through the ``specharness_report_sections`` hook
(entry-point group ``specharness.report``: light modules, e.g. Kangaroo's sweeps and ablation), and
``render.py`` writes Markdown, LaTeX, PNG and PDF. A section without data is skipped with a one-line
note, never an error.
"""

from __future__ import annotations

from pathlib import Path

from .. import stats
from ..costmodel import Profile
from ..errors import UsageError, blamed_on
from . import figures, looping, scaling, tables
from .looping import LoopRule
from .render import Writer
from .runs import Run, select_runs
from .sections import Figure, Note, Section, Table

DEFINITIONS = (
    "Definitions: speedup = vanilla time / method time on the same questions (throughput ratio), "
    "95% paired BCa bootstrap over questions, a question's time = median over its timed repeats; "
    "CR = generated tokens / target forwards; CTAR(w) = fraction of verification rounds with at "
    "least w accepted draft tokens (= the paper's I(s_k - w > 0) with s_k counting the bonus "
    "token); break-even acceptance = draft seconds per drafted token / seconds of a vanilla step "
    "(draft cost) or (round cost / vanilla step - 1) / mean draft length (full round cost).\n")


def method_sections(runs: list[Run], plugins: list[str]) -> list[Section]:
    """Sections the methods contribute (entry-point group ``specharness.report`` and --plugin)."""
    from ..plugins import REPORT_GROUP, entry_point_plugins, new_manager, register_plugins
    pm = new_manager()
    for name, module in entry_point_plugins(REPORT_GROUP, required=False):
        pm.register(module, name=name)
    register_plugins(pm, plugins)
    out = []
    # each plugin in pluggy's call order, one at a time, so a failure names its plugin
    for impl in reversed(pm.hook.specharness_report_sections.get_hookimpls()):
        with blamed_on(f"report plugin '{impl.plugin_name}'"):
            sections = list(impl.function(runs=runs) or [])
        wrong = next((s for s in sections if not isinstance(s, (Table, Figure, Note))), None)
        if wrong is not None:
            raise UsageError(f"report plugin '{impl.plugin_name}' returned {type(wrong).__name__} {str(wrong)[:40]!r}, "
                             "not a section; return Table, Figure or Note objects (specharness.report.sections)")
        out += sections
    return out


def build_report(paths: list[str | Path], out: str | Path, plugins: list[str] | None = None,
                 ctar_subtask: str = "math_reasoning", profile: str | Path | None = None,
                 loop_rule: LoopRule = LoopRule()) -> Writer:
    import matplotlib
    matplotlib.use("Agg")
    runs = select_runs(paths)
    writer = Writer(Path(out))
    for build in (tables.table1, lambda rs: looping.looping(rs, loop_rule), tables.detail, tables.identity,
                  tables.paired_tests, tables.acceptance, tables.sources, tables.cost_model, tables.hardware):
        for section in build(runs):
            writer.add(section)
    if profile:
        measured = Profile.load(profile)
        for section in [*tables.cost_model_profile(runs, measured), *tables.ceilings(runs, measured)]:
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
    head = ["# specharness report\n", DEFINITIONS + f"Looping: {loop_rule.definition()}; `table1_noloop` is "
            "Table 1 on the turns that do not loop.\n", "## Inputs\n", inputs + "\n"]
    if stab:
        head += ["## Unstable timings\n", stab + "\n"]
    writer.finish(head, [str(r.path) for r in runs])
    return writer
