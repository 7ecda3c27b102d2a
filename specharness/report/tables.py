"""python -m specharness report RESULT_FILES... --out DIR: paper-style tables and figures.

Everything comes from result files (``RUN.jsonl`` + ``RUN.meta.json``); no model is loaded.

Which file goes where, decided from the headers alone:

- A *run* is one result file. Its label is the method name plus the options that differ between
  the files of that method (``kangaroo (eta=0.4, gamma=4)``), plus the temperature when files of
  several temperatures are given.
- Its baseline is a ``vanilla`` file with the same model, dtype, device, max_new_tokens and
  temperature; among several, the one from the same command (the same ``compare`` run) and with
  the most shared questions. Speedups are paired over the questions both files hold.
- *Main* runs (Table 1, Figure 1) are, per method and temperature, the file whose options equal
  the method's declared defaults (when the method's plugin can be imported), else every file of it.
- Table 2 (ablation) rows: files of one method whose options differ in anything but the sweep
  options (exit_layer, eta, gamma), e.g. different ``adapter`` paths, with the sweep options
  held at the main file's values. Parameters come from ``extra_params`` / ``target_params`` in the
  header; a ``drafter_info`` dict in the header (e.g. ``{"ffn": true, "lm_head": "shared"}``), if
  a trainer or method records one, becomes extra columns.
- Figure 3(a): files of a method with >= 2 ``exit_layer`` values, other sweep options at the main
  file's values. Figure 3(b): files with >= 2 ``eta`` values, one curve per ``gamma``. A file is an
  ``oracle`` stop when its method name contains "oracle" or an option's value is "oracle".

A table or figure without data is skipped with a one-line note, never an error.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import metrics, stats
from .errors import UsageError
from .results import BASELINE_IDENTITY, iter_result_files, read_results
from tasks.specbench import SUBTASKS

SWEEP_KEYS = ("exit_layer", "eta", "gamma")
SUBTASK_TITLES = {"multi_turn": "MT-bench", "translation": "Translation", "summarization": "Summarization",
                  "qa": "QA", "math_reasoning": "Math", "rag": "RAG"}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
HATCHES = ["", "//", "\\\\", "xx", "..", "oo", "--", "++", "**", "||"]
GRAYS = ["0.0", "0.45", "0.7", "0.25", "0.6", "0.85", "0.15", "0.55"]


# ---- loading and grouping ------------------------------------------------------------------
@dataclass
class Run:
    path: Path
    meta: dict
    records: list[dict]
    label: str = ""
    short: str = ""  # the label in Table 1 and Figure 1: the method name when it is its only main file
    baseline: "Run | None" = None
    main: bool = False
    cells: dict = field(default_factory=dict, repr=False)  # numbers per subtask, see ``cell``

    @property
    def method(self) -> str:
        return self.meta.get("method", "?")

    @property
    def options(self) -> dict:
        return self.meta.get("options") or {}

    @property
    def temperature(self) -> float:
        return float(self.meta.get("temperature", 0.0) or 0.0)

    @property
    def is_vanilla(self) -> bool:
        return self.method == "vanilla"

    @property
    def is_oracle(self) -> bool:
        return "oracle" in self.method or any(str(v) == "oracle" for v in self.options.values())

    def subset(self, subtask: str | None) -> list[dict]:
        return [r for r in self.records if subtask in (None, "overall") or r.get("subtask") == subtask]


def expand_paths(items: list[str]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = list(iter_result_files(p)) or sorted(
                q for sub in sorted(p.iterdir()) if sub.is_dir() for q in iter_result_files(sub))
            if not found:
                raise UsageError(f"directory '{p}' holds no result files (*.jsonl with a .meta.json)")
            out.extend(found)
        elif p.name.endswith(".meta.json"):
            out.append(p.with_name(p.name[:-len(".meta.json")] + ".jsonl"))
        else:
            out.append(p)
    seen, uniq = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            uniq.append(p)
    return uniq


def load_runs(paths: list[Path]) -> list[Run]:
    runs = []
    for p in paths:
        meta, records = read_results(p)
        if not records:
            print(f"note: {p} holds no question records; left out", file=sys.stderr)
            continue
        runs.append(Run(p, meta, records))
    if not runs:
        raise UsageError("no result file with question records was given")
    return runs


def _fmt_value(v: Any) -> str:
    if isinstance(v, str) and ("/" in v or "\\" in v):
        return Path(v).name or v
    return str(v)


def assign_labels(runs: list[Run]) -> None:
    temps = {r.temperature for r in runs}
    by_method: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_method[r.method].append(r)
    for method, group in by_method.items():
        keys = sorted({k for r in group for k in r.options})
        varying = [k for k in keys if len({json.dumps(r.options.get(k), sort_keys=True) for r in group}) > 1]
        for r in group:
            parts = [f"{k}={_fmt_value(r.options.get(k))}" for k in varying]
            if len(temps) > 1:
                parts.append(f"T={r.temperature:g}")
            r.label = method + (f" ({', '.join(parts)})" if parts else "")
    counts = Counter(r.label for r in runs)
    for r in runs:  # same method and options twice (two runs): tell them apart by file name
        if counts[r.label] > 1:
            r.label += f" [{r.path.stem}]"


def assign_baselines(runs: list[Run]) -> None:
    vanillas = [r for r in runs if r.is_vanilla]
    for r in runs:
        if r.is_vanilla:
            r.baseline = r
            continue
        ids = {q["question_id"] for q in r.records}
        best, best_key = None, None
        for v in vanillas:
            if any(v.meta.get(k) != r.meta.get(k) for k in BASELINE_IDENTITY):
                continue
            overlap = len(ids & {q["question_id"] for q in v.records})
            key = (v.meta.get("command") == r.meta.get("command"), overlap)
            if overlap and (best_key is None or key > best_key):
                best, best_key = v, key
        r.baseline = best


def _declared_defaults(plugins: list[str]) -> dict[str, dict]:
    try:
        from .plugins import build_registry
        reg = build_registry(plugins)
    except Exception as exc:  # a report must not need the plugins; fall back to "every file is main"
        print(f"note: method plugins not loadable ({type(exc).__name__}: {exc}); every file counts as "
              "a main run", file=sys.stderr)
        return {}
    out = {}
    for name in reg.methods:
        out[name] = {o.name: o.default for o in reg.method(name).options}
    return out


def _mode(values) -> Any:
    return json.loads(Counter(json.dumps(v, sort_keys=True) for v in values).most_common(1)[0][0])


def _mode_is_unique(values) -> bool:
    top = Counter(json.dumps(v, sort_keys=True) for v in values).most_common(2)
    return len(top) < 2 or top[0][1] > top[1][1]


def assign_main(runs: list[Run], defaults: dict[str, dict]) -> None:
    """Per method and temperature: the files with the declared default options, else the files
    whose every option has its most common value among that method's files, else all of them."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[(r.method, r.temperature)].append(r)
    for (method, _), group in groups.items():
        if len(group) == 1:
            group[0].main = True
            continue
        chosen: list[Run] = []
        d = defaults.get(method)
        if d:
            chosen = [r for r in group if all(r.options.get(k) == v for k, v in d.items() if k in r.options)]
        if not chosen:
            keys = sorted({k for r in group for k in r.options})
            mode = {k: _mode(r.options.get(k) for r in group) for k in keys}
            chosen = [r for r in group if all(r.options.get(k) == v for k, v in mode.items())]
            if not all(_mode_is_unique(r.options.get(k) for r in group) for k in keys):
                chosen = []  # a tie: no file stands for the method, all are shown
        for r in chosen or group:
            r.main = True
    for r in runs:
        group = groups[(r.method, r.temperature)]
        peers = [x for x in group if x.main]
        r.short = r.label
        if r.main and len(peers) == 1 and (len(group) == 1 or len(peers) < len(group)):
            temps = {x.temperature for x in runs}
            r.short = r.method + (f" (T={r.temperature:g})" if len(temps) > 1 else "")


# ---- numbers ----------------------------------------------------------------------------------
@dataclass
class Cell:
    speedup: stats.Estimate
    cr: stats.Estimate
    n: int
    unstable: int = 0
    tokens_per_s: float = float("nan")


def cell(run: Run, subtask: str | None) -> Cell:
    """A run's numbers for one subtask, computed once and kept on the run itself."""
    key = (subtask, run.baseline.path if run.baseline else None, len(run.records))
    if key not in run.cells:
        run.cells[key] = _cell(run, subtask)
    return run.cells[key]


def _cell(run: Run, subtask: str | None) -> Cell:
    recs = run.subset(subtask)
    unstable = len(stats.unstable_timings(recs).unstable)
    if subtask in (None, "overall"):
        present = [s for s in SUBTASKS if run.subset(s)]
        if run.baseline is not None:
            sp = stats.mean_speedup_ci([stats.pair(run.subset(s), run.baseline.records) for s in present])
        else:
            sp = stats.NAN_ESTIMATE
        cr = stats.mean_cr_ci([run.subset(s) for s in present])
        base_unstable = len(stats.unstable_timings(run.baseline.records).unstable) if run.baseline else 0
    else:
        sp = (stats.speedup_ci(stats.pair(recs, run.baseline.records)) if run.baseline is not None
              else stats.NAN_ESTIMATE)
        cr = stats.cr_ci(recs)
        base_unstable = (len(stats.unstable_timings(run.baseline.subset(subtask)).unstable)
                         if run.baseline else 0)
    if run.is_vanilla:
        sp = stats.Estimate(1.0, 1.0, 1.0, len(recs), "baseline")
        base_unstable = 0
    return Cell(sp, cr, len(recs), unstable + base_unstable, metrics.throughput(recs))


def _subtasks_present(runs: list[Run]) -> list[str]:
    return [s for s in SUBTASKS if any(r.subset(s) for r in runs)]


# ---- table writers -------------------------------------------------------------------------------
def _tex(s: str) -> str:
    for a, b in (("\\", "\\textbackslash{}"), ("_", "\\_"), ("%", "\\%"), ("&", "\\&"), ("#", "\\#"),
                 ("×", "$\\times$"), ("†", "$^\\dagger$"), ("η", "$\\eta$"), ("γ", "$\\gamma$")):
        s = s.replace(a, b)
    return s


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def latex_table(header: list[str], rows: list[list[str]], caption: str, label: str,
                group_header: list[tuple[str, int]] | None = None) -> str:
    cols = "l" + "c" * (len(header) - 1)
    out = ["\\begin{table}[t]", "\\centering", "\\small", f"\\begin{{tabular}}{{{cols}}}", "\\toprule"]
    if group_header:
        out.append(" & ".join(f"\\multicolumn{{{n}}}{{c}}{{{_tex(t)}}}" if n > 1 else _tex(t)
                              for t, n in group_header) + " \\\\")
        start = 1
        rules = []
        for t, n in group_header:
            if n > 1 and t:
                rules.append(f"\\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        out.append(" ".join(rules))
    out.append(" & ".join(_tex(h) for h in header) + " \\\\")
    out.append("\\midrule")
    out += [" & ".join(_tex(c) for c in r) + " \\\\" for r in rows]
    out += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{_tex(caption)}}}", f"\\label{{{label}}}",
            "\\end{table}"]
    return "\n".join(out) + "\n"


def _params(r: Run) -> str:
    """Parameters the method adds to the target (and their share of it), from the run header."""
    extra, tp = r.meta.get("extra_params"), r.meta.get("target_params")
    if not isinstance(extra, (int, float)):
        return "-"
    if not extra:
        return "0"
    share = f" ({100 * extra / tp:.2f}%)" if tp else ""
    return f"{extra / 1e6:.2f}M{share}"


def _sp(c: Cell) -> str:
    s = "1.00×" if c.speedup.method == "baseline" else c.speedup.fmt(2, "×")
    return s + ("†" if c.unstable else "")


def _cr(c: Cell) -> str:
    return f"{c.cr.value:.2f}" if math.isfinite(c.cr.value) else "-"


class Report:
    def __init__(self, runs: list[Run], out: Path, ctar_subtask: str = "math_reasoning") -> None:
        self.runs = runs
        self.out = out
        self.ctar_subtask = ctar_subtask
        self.notes: list[str] = []
        self.made: list[str] = []
        self.sections: list[str] = []
        self.data: dict[str, Any] = {}
        out.mkdir(parents=True, exist_ok=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"note: {text}")

    def publish(self, name: str, title: str, caption: str, header: list[str], rows: list[list[str]],
                data: dict | None = None) -> None:
        """One table as Markdown (also a report section) and LaTeX; its numbers under ``data``."""
        md = f"**{title}** {caption}\n\n" + markdown_table(header, rows)
        self.write(f"{name}.md", md)
        self.write(f"{name}.tex", latex_table(header, rows, caption, f"tab:{name}"))
        self.sections.append(md)
        if data is not None:
            self.data[name] = data

    def write(self, name: str, text: str) -> None:
        (self.out / name).write_text(text)
        self.made.append(name)

    # ---- Table 1 ---------------------------------------------------------------------------------
    def table1(self) -> None:
        temps = sorted({r.temperature for r in self.runs})
        for t in temps:
            runs = [r for r in self.runs if r.main and r.temperature == t]
            runs.sort(key=lambda r: (not r.is_vanilla, r.short))
            subs = _subtasks_present(runs)
            if not runs or not subs:
                self.note(f"Table 1 (T={t:g}) skipped: no main runs with questions")
                continue
            if not any(r.baseline is not None for r in runs if not r.is_vanilla):
                self.note(f"Table 1 (T={t:g}): no vanilla file matches; speedups are blank")
            header = ["Method", "Extra params"]
            group = [("", 1), ("", 1)]
            for s in subs + ["Avg."]:
                header += ["Speedup [95% CI]", "CR"]
                group.append((SUBTASK_TITLES.get(s, s), 2))
            rows, data = [], {}
            unstable = False
            for r in runs:
                row = [r.short, _params(r)]
                data[r.label] = {"extra_params": r.meta.get("extra_params")}
                for s in subs + ["overall"]:
                    c = cell(r, s)
                    unstable |= bool(c.unstable)
                    row += [_sp(c), _cr(c)]
                    data[r.label][s] = {"speedup": c.speedup.__dict__, "cr": c.cr.__dict__, "n": c.n,
                                        "unstable_questions": c.unstable, "tokens_per_s": c.tokens_per_s}
                rows.append(row)
            van = [r for r in runs if r.is_vanilla]
            caption = (f"Speedup over vanilla decoding (throughput ratio, 95% paired BCa bootstrap interval "
                       f"over questions) and compression rate CR (generated tokens per target forward) per "
                       f"subtask, temperature {t:g}. Avg. = mean over subtasks (stratified bootstrap).")
            if van:
                caption += f" Vanilla: {metrics.throughput(van[0].records):.1f} tokens/s."
            if min(len(r.subset(s)) for r in runs for s in subs) < stats.MIN_QUESTIONS:
                caption += (f" Some cells hold fewer than {stats.MIN_QUESTIONS} questions: their intervals "
                            "are rough.")
            if unstable:
                caption += (f" † some question's timed repeats varied by more than {stats.CV_LIMIT:.0%} "
                            "(coefficient of variation), in this method or its vanilla baseline.")
            suffix = "" if t == 0 else f"_temp{t:g}"
            md = f"**Table 1{'' if t == 0 else f' (T={t:g})'}.** {caption}\n\n" + markdown_table(
                ["Method", "Extra params"] + [f"{SUBTASK_TITLES.get(s, s)} {h}" for s in subs + ['Avg.'] for h in ("speedup", "CR")],
                rows)
            self.write(f"table1{suffix}.md", md)
            self.write(f"table1{suffix}.tex", latex_table(header, rows, caption, f"tab:speedup{suffix}", group))
            self.sections.append(md)
            self.data[f"table1{suffix}"] = data

    # ---- greedy identity ---------------------------------------------------------------------------
    def identity_table(self) -> None:
        """Greedy files against their vanilla baseline, turn by turn: lossless is checked, not assumed."""
        rows, data = [], {}
        for r in sorted(self.runs, key=lambda r: r.label):
            if r.is_vanilla or r.baseline is None or r.temperature != 0:
                continue
            base = {q["question_id"]: q["choices"][0]["token_ids"] for q in r.baseline.records}
            turns, first = 0, None
            for q in r.records:
                for t, (a, b) in enumerate(zip(q["choices"][0]["token_ids"], base.get(q["question_id"], []))):
                    turns += 1
                    if a != b and first is None:
                        j = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                        first = f"question {q['question_id']} turn {t + 1} token {j}"
            differ = sum(1 for q in r.records
                         for a, b in zip(q["choices"][0]["token_ids"], base.get(q["question_id"], [])) if a != b)
            rows.append([r.label, str(turns), str(turns - differ), first or "-"])
            data[r.label] = {"turns": turns, "identical": turns - differ, "first_difference": first}
        if not rows:
            self.note("greedy identity table skipped: no greedy file with a vanilla baseline")
            return
        caption = ("Greedy outputs against vanilla's on the same questions, turn by turn (token ids). A "
                   "difference is a bug unless `specharness lossless` shows a float near-tie at that token.")
        self.publish("identity", "Greedy identity.", caption, ["File", "Turns", "Identical", "First difference"],
                     rows, data)

    # ---- paired tests ------------------------------------------------------------------------------
    def paired_tests(self) -> None:
        rows = []
        for t in sorted({r.temperature for r in self.runs}):
            runs = [r for r in self.runs if r.main and r.temperature == t]
            for i, a in enumerate(runs):
                for b in runs[i + 1:]:
                    if a.is_vanilla:
                        a, b = b, a
                    if any(a.meta.get(k) != b.meta.get(k) for k in BASELINE_IDENTITY):
                        continue
                    pt = stats.paired_test(a.records, b.records)
                    if pt.n < 2:
                        continue
                    rows.append([a.label, b.label, str(pt.n), f"{pt.a_over_b_speed:.3f}",
                                 f"{pt.p_two_sided:.3g}", f"{pt.p_a_faster:.3g}"])
        if not rows:
            self.note("paired tests skipped: fewer than two comparable methods with >= 2 shared questions")
            return
        md = ("**Paired tests.** Wilcoxon signed-rank test on per-question log(time per token of A / "
              "time per token of B), all subtasks. 'A/B speed' = speed ratio at the median question.\n\n"
              + markdown_table(["A", "B", "questions", "A/B speed", "p (two-sided)", "p (A faster)"], rows))
        self.write("paired_tests.md", md)
        self.sections.append(md)

    @staticmethod
    def _overhead(r: Run) -> str:
        """Share of the run's time the per-round timing itself costs (header's measured cost per round)."""
        cost = r.meta.get("instrumentation_s_per_round")
        total = sum(metrics.wall_time(q) for q in r.records)
        if not isinstance(cost, (int, float)) or total <= 0:
            return "-"
        return f"{100 * cost * sum(metrics.forwards(q) for q in r.records) / total:.2f}%"

    # ---- per-subtask detail ------------------------------------------------------------------
    def detail_table(self) -> None:
        runs = sorted((r for r in self.runs if r.main), key=lambda r: (not r.is_vanilla, r.short))
        rows, data = [], {}
        for r in runs:
            gamma = r.options.get("gamma")
            longest = max((d for q in r.records for d, _ in metrics.rounds(q)), default=0)
            width = min(8, max(longest, gamma if isinstance(gamma, int) else 0))
            for sub in [s for s in SUBTASKS if r.subset(s)] + ["overall"]:
                recs = r.subset(sub)
                c = cell(r, sub)
                tps = stats.throughput_ci(recs)
                ctar = metrics.ctar_curve(recs, width) if width else []
                stab = stats.unstable_timings(recs)
                rows.append([r.short, SUBTASK_TITLES.get(sub, "All"), str(len(recs)), tps.fmt(1), _sp(c),
                             c.cr.fmt(2), f"{metrics.mean_draft_length(recs):.2f}" if width else "-",
                             " ".join(f"{x:.2f}" for x in ctar) or "-",
                             f"{len(stab.unstable)}/{stab.questions}" + (f" (max CV {stab.max_cv:.0%})" if stab.unstable
                                                                          else "")])
                data.setdefault(r.label, {})[sub] = {"tokens_per_s": tps.__dict__, "ctar": ctar,
                                                     "mean_draft_length": metrics.mean_draft_length(recs),
                                                     "unstable": stab.unstable}
        if not rows:
            self.note("detail table skipped: no main runs")
            return
        header = ["Method", "Subtask", "n", "Tokens/s [95% CI]", "Speedup [95% CI]", "CR [95% CI]",
                  "Mean draft len.", "CTAR(1..γ)", "Unstable (CV > 10%)"]
        caption = ("Per subtask and overall ('All': tokens/s, CTAR and draft length pool every question; speedup "
                   "and CR are means over subtasks, as in Table 1): throughput, speedup and CR with 95% bootstrap intervals, mean draft length, "
                   "CTAR(w) for w = 1..γ, and questions whose timed repeats varied by more than 10%.")
        self.publish("detail", "Detail.", caption, header, rows, data)

    # ---- acceptance and cost ---------------------------------------------------------------------
    def acceptance_table(self) -> None:
        runs = sorted((r for r in self.runs if r.main and not r.is_vanilla
                       and any(d for q in r.records for d, _ in metrics.rounds(q))), key=lambda r: r.short)
        if not runs:
            self.note("acceptance table skipped: no main run drafted any token")
            return
        width = max(max((d for q in r.records for d, _ in metrics.rounds(q)), default=0) for r in runs)
        width = min(width, 8)
        header = ["Method", "Mean draft len.", "Accept. rate", *[f"CTAR({w})" for w in range(1, width + 1)],
                  "Accept. by position", "Draft ms/token", "Verify ms/round", "Vanilla ms/step",
                  "Break-even (draft)", "Break-even (full)", "Timing overhead"]
        rows, data = [], {}
        for r in runs:
            tb = metrics.time_breakdown(r.records)
            base = r.baseline.records if r.baseline else []
            c_v = metrics.vanilla_step_cost(base) if base else float("nan")
            ctar = metrics.ctar_curve(r.records, width)
            by_pos = metrics.acceptance_by_position(r.records, width)
            be = metrics.break_even_acceptance(r.records, base) if base else float("nan")
            if not tb["draft_s"]:  # a decoder that times only whole rounds (transformers' peers)
                be = tb["draft_s_per_token"] = float("nan")
            be_full = metrics.break_even_acceptance(r.records, base, full=True) if base else float("nan")

            def f(x, scale=1.0, d=3):
                return f"{x * scale:.{d}f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"
            rows.append([r.short, f(metrics.mean_draft_length(r.records), d=2), f(metrics.acceptance_rate(r.records)),
                         *[f(c) for c in ctar], " ".join(f(x, d=2) for x in by_pos),
                         f(tb["draft_s_per_token"], 1e3, 2), f(tb["verify_s_per_round"], 1e3, 2), f(c_v, 1e3, 2),
                         f(be), f(be_full), self._overhead(r)])
            data[r.label] = {"ctar": ctar, "acceptance_by_position": by_pos, "break_even_draft": be,
                             "break_even_full": be_full, **tb, "vanilla_step_s": c_v}
        caption = ("Why: acceptance and cost per round, all subtasks. CTAR(w) = fraction of verification rounds "
                   "accepting >= w drafts; acceptance by position = P(draft i accepted | drafts before it "
                   "accepted); a drafted token pays only if accepted at least at the break-even rate "
                   "(draft: draft cost per token / vanilla step; full: every extra second of a round counted).")
        self.publish("acceptance", "Acceptance and cost.", caption, header, rows, data)

    # ---- cost model ------------------------------------------------------------------------------
    def cost_model_table(self) -> None:
        """Every file whose rounds were timed by the engine: the cost model's speedup beside the measured."""
        rows, data = [], {}
        for r in sorted(self.runs, key=lambda r: (r.short, r.label)):
            if r.is_vanilla or r.baseline is None:
                continue
            cm = metrics.cost_model(r.records, r.baseline.records)
            if not cm:
                continue
            ms = lambda x: f"{1e3 * x:.2f}"  # noqa: E731
            by_k = cm["verify_s_by_drafted"]
            verify = " ".join(f"{k}:{ms(t)}" for k, (t, _) in by_k.items() if k in (1, 2, 3, 4, 6, 8)) or "-"
            gap = cm["gap"]
            rows.append([r.label, ms(cm["draft_step_s"]), ms(cm["draft_fixed_s"]), verify, ms(cm["bookkeeping_s"]),
                         ms(cm["vanilla_step_s"]), f"{cm['draft_step_over_vanilla']:.3f}",
                         f"{metrics.compression_rate(r.records):.2f}", f"{cm['predicted_speedup']:.3f}×",
                         f"{cm['measured_speedup']:.3f}×", f"{100 * gap:+.1f}%" + (" ‡" if abs(gap) > 0.10 else "")])
            data[r.label] = cm
        if not rows:
            self.note("cost-model table skipped: no engine-timed run with a vanilla baseline")
            return
        header = ["File", "Draft ms/step", "Draft ms/round (fixed)", "Verify ms by drafted k", "Bookkeeping ms/round",
                  "Vanilla ms/step", "Draft step / vanilla step", "CR", "Predicted speedup", "Measured speedup",
                  "Measured vs predicted"]
        caption = ("Cost model: per-round costs fitted over each file's rounds (draft = fixed + k × step; verify "
                   "= one deep forward over k + 1 positions, mean ms shown by k; bookkeeping = accept) and its own "
                   "rounds' draft lengths predict its time; vanilla = prefill + one step per token. ‡ measured "
                   "differs from predicted by more than 10%: unexplained overhead or drift.")
        self.publish("cost_model", "Cost model.", caption, header, rows, data)

    # ---- Table 2 ---------------------------------------------------------------------------------
    def _anchor(self, group: list[Run]) -> dict:
        """Option values to hold fixed in sweeps and ablations: the main file's, else the most common."""
        mains = [r for r in group if r.main]
        keys = sorted({k for r in group for k in r.options} | set(SWEEP_KEYS))
        if len(mains) == 1:
            return {k: mains[0].options.get(k) for k in keys}
        return {k: _mode(r.options.get(k) for r in group) for k in keys}

    def _method_groups(self) -> dict[tuple, list[Run]]:
        groups: dict[tuple, list[Run]] = defaultdict(list)
        for r in self.runs:
            if not r.is_vanilla and not r.is_oracle:
                groups[(r.method, r.temperature)].append(r)
        return groups

    def table2(self) -> None:
        rows_all = []
        for (method, t), group in sorted(self._method_groups().items()):
            keys = sorted({k for r in group for k in r.options} - set(SWEEP_KEYS))
            varying = [k for k in keys if len({json.dumps(r.options.get(k), sort_keys=True) for r in group}) > 1]
            if not varying:
                continue
            anchor = self._anchor(group)
            rows = [r for r in group if all(r.options.get(k) == anchor[k] for k in SWEEP_KEYS)]
            if len(rows) < 2:
                continue
            info_keys = sorted({k for r in rows for k in (r.meta.get("drafter_info") or {})})
            for r in sorted(rows, key=lambda r: r.label):
                c = cell(r, "overall")
                extra = r.meta.get("extra_params")
                tp = r.meta.get("target_params")
                share = f"{100 * extra / tp:.2f}%" if extra is not None and tp else "-"
                variant = ", ".join(f"{k}={_fmt_value(r.options.get(k))}" for k in varying)
                info = [str((r.meta.get("drafter_info") or {}).get(k, "-")) for k in info_keys]
                rows_all.append((info_keys, [method, variant, *info,
                                             f"{extra / 1e6:.3f}M" if extra is not None else "-", share,
                                             _sp(c), c.cr.fmt(2), f"{metrics.mean_draft_length(r.records):.2f}",
                                             f"{metrics.acceptance_rate(r.records):.3f}"]))
        if not rows_all:
            self.note("Table 2 (ablation) skipped: no method has files that differ in an option other than "
                      "exit_layer/eta/gamma (e.g. kangaroo runs with different -o adapter=...)")
            return
        info_keys = sorted({k for ks, _ in rows_all for k in ks})
        header = ["Method", "Variant", *info_keys, "Extra params", "% of target", "Speedup [95% CI]", "CR [95% CI]",
                  "Mean draft len.", "Accept. rate"]
        rows = []
        for ks, row in rows_all:  # align drafter_info columns across methods
            vals = dict(zip(ks, row[2:2 + len(ks)]))
            rows.append(row[:2] + [vals.get(k, "-") for k in info_keys] + row[2 + len(ks):])
        caption = ("Ablation: variants of one method that differ in options other than the sweep options, "
                   "with exit layer, eta and gamma held at the main run's values. Speedup and CR are "
                   "averages over subtasks; acceptance rate = accepted / drafted tokens.")
        self.publish("table2", "Table 2.", caption, header, rows)

    # ---- figures ------------------------------------------------------------------------------------
    def _save(self, fig, name: str) -> None:
        import matplotlib.pyplot as plt
        for ext in ("png", "pdf"):
            fig.savefig(self.out / f"{name}.{ext}", dpi=150, bbox_inches="tight")
            self.made.append(f"{name}.{ext}")
        plt.close(fig)
        self.sections.append(f"![{name}]({name}.png)\n")

    def fig1a(self) -> None:
        import matplotlib.pyplot as plt
        sub = self.ctar_subtask
        series = []
        for r in sorted((r for r in self.runs if r.main and not r.is_vanilla), key=lambda r: r.short):
            recs = r.subset(sub)
            longest = max((d for q in recs for d, _ in metrics.rounds(q)), default=0)
            gamma = r.options.get("gamma")
            curve = metrics.ctar_curve(recs, max(longest, gamma if isinstance(gamma, int) else 0))
            if longest:
                series.append((r.short, curve))
        if not series:
            self.note(f"Figure 1(a) skipped: no drafting method has rounds on {sub}")
            return
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for i, (label, curve) in enumerate(series):
            ax.plot(range(1, len(curve) + 1), curve, marker=MARKERS[i % len(MARKERS)],
                    linestyle=LINESTYLES[i % len(LINESTYLES)], color=GRAYS[i % len(GRAYS)], label=label,
                    markerfacecolor="white" if i % 2 else GRAYS[i % len(GRAYS)])
        ax.set_xlabel("w (draft tokens accepted in a round)")
        ax.set_ylabel("CTAR(w) (fraction of rounds)")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"CTAR on {SUBTASK_TITLES.get(sub, sub)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        self.data["fig1a"] = dict(series)
        self._save(fig, "fig1a_ctar")

    def fig1b(self) -> None:
        import matplotlib.pyplot as plt
        import numpy as np
        runs = sorted((r for r in self.runs if r.main and not r.is_vanilla and r.baseline is not None),
                      key=lambda r: r.short)
        subs = _subtasks_present(runs)
        if not runs or not subs:
            self.note("Figure 1(b) skipped: no method with a matching vanilla baseline")
            return
        cols = subs + ["overall"]
        fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(cols) * max(1, len(runs)) / 2 + 2), 3.6))
        width = 0.8 / len(runs)
        x = np.arange(len(cols))
        for i, r in enumerate(runs):
            cs = [cell(r, s) for s in cols]
            vals = np.array([c.speedup.value for c in cs])
            lo = np.array([c.speedup.value - c.speedup.low if math.isfinite(c.speedup.low) else 0 for c in cs])
            hi = np.array([c.speedup.high - c.speedup.value if math.isfinite(c.speedup.high) else 0 for c in cs])
            ax.bar(x + (i - (len(runs) - 1) / 2) * width, vals, width, yerr=[lo, hi], capsize=2,
                   label=r.short, color=GRAYS[i % len(GRAYS)] if i % 3 else "white", edgecolor="black",
                   hatch=HATCHES[i % len(HATCHES)], error_kw={"elinewidth": 0.8})
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(x, [SUBTASK_TITLES.get(s, "Avg.") if s != "overall" else "Avg." for s in cols])
        ax.set_ylabel("speedup over vanilla (×, 95% CI)")
        ax.set_xlabel("subtask")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(3, len(runs)))
        ax.grid(axis="y", alpha=0.3)
        self._save(fig, "fig1b_speedup")

    def _sweep(self, key: str) -> dict[str, list[Run]]:
        """Per method label: files differing in ``key``, other sweep options held at the anchor."""
        out = {}
        for (method, t), group in sorted(self._method_groups().items()):
            if len({r.options.get(key) for r in group if r.options.get(key) is not None}) < 2:
                continue
            anchor = self._anchor(group)
            if key == "exit_layer":  # an adapter is trained for one exit layer: only eta, gamma held
                hold = [k for k in ("eta", "gamma") if k in anchor]
            else:  # everything but the swept key and gamma (one curve per gamma)
                hold = [k for k in anchor if k not in (key, "gamma")]
            chosen = [r for r in group if r.options.get(key) is not None
                      and all(r.options.get(k) == anchor[k] for k in hold)]
            if key == "exit_layer":  # adapters differ by exit layer: keep one file per layer
                per: dict = {}
                for r in sorted(chosen, key=lambda r: (r.main, len(r.records), r.meta.get("created", ""))):
                    per[r.options[key]] = r
                chosen = list(per.values())
            if len({r.options.get(key) for r in chosen}) >= 2:
                out[f"{method}" + (f" (T={t:g})" if len({x.temperature for x in self.runs}) > 1 else "")] = chosen
        return out

    def fig3a(self) -> None:
        import matplotlib.pyplot as plt
        sweeps = self._sweep("exit_layer")
        if not sweeps:
            self.note("Figure 3(a) skipped: no method has files with >= 2 exit_layer values")
            return
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        data = {}
        for i, (name, group) in enumerate(sweeps.items()):
            group = sorted(group, key=lambda r: r.options["exit_layer"])
            ls = [r.options["exit_layer"] for r in group]
            cs = [cell(r, "overall") for r in group]
            style = dict(marker=MARKERS[i % len(MARKERS)], color=GRAYS[i % len(GRAYS)],
                         linestyle=LINESTYLES[i % len(LINESTYLES)])
            axes[0].plot(ls, [c.cr.value for c in cs], label=name, **style)
            sp = [c.speedup for c in cs]
            axes[1].errorbar(ls, [e.value for e in sp],
                             yerr=[[e.value - e.low if math.isfinite(e.low) else 0 for e in sp],
                                   [e.high - e.value if math.isfinite(e.high) else 0 for e in sp]],
                             capsize=3, label=name, **style)
            acc = [metrics.acceptance_rate(r.records) for r in group]
            be = [metrics.break_even_acceptance(r.records, r.baseline.records) if r.baseline else float("nan")
                  for r in group]
            be_full = [metrics.break_even_acceptance(r.records, r.baseline.records, full=True)
                       if r.baseline else float("nan") for r in group]
            axes[2].plot(ls, acc, label=f"{name}: measured", **style)
            axes[2].plot(ls, be, label=f"{name}: break-even (draft cost)", marker=style["marker"],
                         color=style["color"], linestyle=":", markerfacecolor="white")
            axes[2].plot(ls, be_full, label=f"{name}: break-even (full round cost)", marker="x",
                         color=style["color"], linestyle="--")
            data[name] = {"exit_layer": ls, "cr": [c.cr.value for c in cs], "speedup": [e.__dict__ for e in sp],
                          "acceptance": acc, "break_even_draft": be, "break_even_full": be_full}
        axes[1].axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axes[0].set_ylabel("CR (tokens per target forward)")
        axes[1].set_ylabel("speedup over vanilla (×, 95% CI)")
        axes[2].set_ylabel("acceptance per drafted token (fraction)")
        titles = ["compression rate", "speedup", "acceptance vs break-even"]
        for ax, title in zip(axes, titles):
            ax.set_xlabel("exit layer l (decoder layers before the draft head)")
            ax.set_title(title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        self.data["fig3a"] = data
        self._save(fig, "fig3a_exit_layer")

    def fig3b(self) -> None:
        import matplotlib.pyplot as plt
        sweeps = self._sweep("eta")
        oracles = [r for r in self.runs if r.is_oracle]
        if not sweeps:
            self.note("Figure 3(b) skipped: no method has files with >= 2 eta values")
        else:
            fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
            i = 0
            data, gamma_marker = {}, {}
            for name, group in sweeps.items():
                for g in sorted({r.options.get("gamma") for r in group}, key=lambda v: (v is None, v)):
                    runs = sorted((r for r in group if r.options.get("gamma") == g), key=lambda r: r.options["eta"])
                    etas = [r.options["eta"] for r in runs]
                    cs = [cell(r, "overall") for r in runs]
                    style = dict(marker=MARKERS[i % len(MARKERS)], color=GRAYS[i % len(GRAYS)],
                                 linestyle=LINESTYLES[i % len(LINESTYLES)])
                    lab = f"{name}, γ={g}"
                    gamma_marker.setdefault(str(g), style["marker"])
                    axes[0].plot(etas, [c.cr.value for c in cs], label=lab, **style)
                    sp = [c.speedup for c in cs]
                    axes[1].errorbar(etas, [e.value for e in sp],
                                     yerr=[[e.value - e.low if math.isfinite(e.low) else 0 for e in sp],
                                           [e.high - e.value if math.isfinite(e.high) else 0 for e in sp]],
                                     capsize=3, label=lab, **style)
                    data[lab] = {"eta": etas, "cr": [c.cr.value for c in cs], "speedup": [e.__dict__ for e in sp]}
                    i += 1
            gammas = [str(v) for v in sorted({r.options.get("gamma") for r in oracles},
                                             key=lambda v: (v is None, str(v).zfill(8)))]
            for j, r in enumerate(sorted(oracles, key=lambda r: (str(r.options.get("gamma")), r.label))):
                c = cell(r, "overall")
                g = str(r.options.get("gamma"))
                x = 0.6 + 0.025 * (gammas.index(g) + 1)  # drawn just beside eta = 0.6, the paper's default
                style = dict(marker=gamma_marker.get(g, "*"), markersize=10, linestyle="none",
                             markerfacecolor="white", markeredgecolor="black", markeredgewidth=1.6, color="black")
                lab = f"oracle stop, γ={g} (drawn beside η=0.6)"
                axes[0].plot([x], [c.cr.value], label=lab, **style)
                e = c.speedup
                axes[1].errorbar([x], [e.value], yerr=[[e.value - e.low if math.isfinite(e.low) else 0],
                                                       [e.high - e.value if math.isfinite(e.high) else 0]],
                                 capsize=3, label=lab, **style)
            axes[1].axhline(1.0, color="black", linewidth=0.8, linestyle="--")
            axes[0].set_ylabel("CR (tokens per target forward)")
            axes[1].set_ylabel("speedup over vanilla (×, 95% CI)")
            for ax, title in zip(axes, ("compression rate", "speedup")):
                ax.set_xlabel("η (confidence threshold of the draft stop)")
                ax.set_title(title)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=6)
            self.data["fig3b"] = data
            self._save(fig, "fig3b_eta")
        self._oracle_table(sweeps, oracles)
        self._best_eta_table(sweeps)

    def _oracle_table(self, sweeps: dict[str, list[Run]], oracles: list[Run]) -> None:
        if not oracles:
            self.note("oracle table skipped: no oracle-stop result file (method name with 'oracle')")
            return
        rows = []
        for o in sorted(oracles, key=lambda r: r.label):
            g = o.options.get("gamma")
            peer = None
            for group in sweeps.values():
                for r in group:
                    if r.options.get("eta") == 0.6 and (g is None or r.options.get("gamma") == g) \
                            and r.temperature == o.temperature:
                        peer = r
            if peer is None:  # a main file at eta = 0.6 also qualifies
                peer = next((r for r in self.runs if r.main and r.options.get("eta") == 0.6
                             and r.temperature == o.temperature and (g is None or r.options.get("gamma") == g)), None)
            co = cell(o, "overall")
            row = [o.label, str(g) if g is not None else "-", _sp(co), co.cr.fmt(2),
                   f"{metrics.mean_draft_length(o.records):.2f}"]
            if peer is not None:
                cp = cell(peer, "overall")
                row += [peer.label, _sp(cp), cp.cr.fmt(2), f"{metrics.mean_draft_length(peer.records):.2f}"]
            else:
                row += ["(no η=0.6 file)", "-", "-", "-"]
            rows.append(row)
        header = ["Oracle file", "γ", "Oracle speedup", "Oracle CR", "Oracle draft len.",
                  "η=0.6 file", "η=0.6 speedup", "η=0.6 CR", "η=0.6 draft len."]
        caption = ("Oracle stop (drafting stops exactly where the target first disagrees; an upper bound on "
                   "any confidence stop) beside the confidence stop at η = 0.6, averages over subtasks.")
        self.publish("oracle_vs_eta", "Oracle vs η = 0.6.", caption, header, rows)

    def _best_eta_table(self, sweeps: dict[str, list[Run]]) -> None:
        if not sweeps:
            self.note("best-eta table skipped: no eta sweep")
            return
        rows = []
        for name, group in sweeps.items():
            for g in sorted({r.options.get("gamma") for r in group}, key=lambda v: (v is None, v)):
                runs = [r for r in group if r.options.get("gamma") == g and r.baseline is not None]
                if len(runs) < 2:
                    continue
                for s in _subtasks_present(runs) + ["overall"]:
                    cs = [(r, cell(r, s)) for r in runs]
                    cs = [(r, c) for r, c in cs if math.isfinite(c.speedup.value)]
                    if not cs:
                        continue
                    best, cb = max(cs, key=lambda rc: rc[1].speedup.value)
                    at06 = next((c for r, c in cs if r.options.get("eta") == 0.6), None)
                    rows.append([name, str(g), SUBTASK_TITLES.get(s, "Avg."), f"{best.options['eta']:g}",
                                 _sp(cb), _sp(at06) if at06 else "-",
                                 "yes" if at06 and cb.speedup.low > at06.speedup.high else "no"])
        if not rows:
            self.note("best-eta table skipped: no eta sweep with a vanilla baseline")
            return
        header = ["Method", "γ", "Subtask", "Best η", "Speedup at best η", "Speedup at η=0.6",
                  "Best beats 0.6 (CIs disjoint)"]
        caption = "Best confidence threshold η per subtask (highest speedup among the η values run)."
        self.publish("best_eta", "Best η per subtask.", caption, header, rows)

    # ---- all ------------------------------------------------------------------------------------
    def build(self) -> None:
        import matplotlib
        matplotlib.use("Agg")
        for step in (self.table1, self.detail_table, self.identity_table, self.paired_tests, self.acceptance_table, self.cost_model_table,
                     self.table2, self.fig1a, self.fig1b,
                     self.fig3a, self.fig3b):
            step()
        inputs = "\n".join(f"- `{r.path}`: {r.label}, {len(r.records)} questions"
                           + (f", baseline `{r.baseline.path.name}`" if r.baseline and not r.is_vanilla else "")
                           + (" (main)" if r.main else "") for r in self.runs)
        unstable = [(r.label, stats.unstable_timings(r.records)) for r in self.runs]
        stab = "\n".join(f"- {lab}: {len(s.unstable)}/{s.questions} questions with CV > {stats.CV_LIMIT:.0%} "
                         f"(max {s.max_cv:.1%}, {s.repeats} repeats)" for lab, s in unstable if s.unstable)
        text = ["# specharness report\n",
                "Definitions: speedup = vanilla time / method time on the same questions (throughput ratio), "
                "95% paired BCa bootstrap over questions, a question's time = median over its timed repeats; "
                "CR = generated tokens / target forwards; CTAR(w) = fraction of verification rounds with at "
                "least w accepted draft tokens (= the paper's I(s_k - w > 0) with s_k counting the bonus "
                "token); break-even acceptance = draft seconds per drafted token / seconds of a vanilla step "
                "(draft cost) or (round cost / vanilla step - 1) / mean draft length (full round cost).\n",
                "## Inputs\n", inputs + "\n"]
        if stab:
            text += ["## Unstable timings\n", stab + "\n"]
        text += ["## Tables and figures\n", *[s + "\n" for s in self.sections]]
        if self.notes:
            text += ["## Skipped\n", "\n".join(f"- {n}" for n in self.notes) + "\n"]
        self.write("report.md", "\n".join(text))
        self.write("report.json", json.dumps({"inputs": [str(r.path) for r in self.runs], "notes": self.notes,
                                              **self.data}, indent=1, default=str))


def build_report(paths: list[str | Path], out: str | Path, plugins: list[str] | None = None,
                 ctar_subtask: str = "math_reasoning", use_declared_defaults: bool = True) -> Report:
    runs = load_runs(expand_paths([str(p) for p in paths]))
    assign_labels(runs)
    assign_baselines(runs)
    assign_main(runs, _declared_defaults(plugins or []) if use_declared_defaults else {})
    rep = Report(runs, Path(out), ctar_subtask)
    rep.build()
    return rep


def add_report_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="paper-style tables and figures from result files (no model needed)",
        description="Table 1 (speedup with 95% CI and CR per subtask), Table 2 (ablation), paired tests, "
                    "Figure 1(a) CTAR curves, 1(b) speedup bars, 3(a) exit-layer sweep, 3(b) eta sweep with "
                    "the oracle stop and the best eta per subtask; Markdown, LaTeX, PNG and PDF.")
    p.add_argument("results", nargs="+", metavar="RESULT_FILE_OR_DIR",
                   help="result files (.jsonl with its .meta.json) or directories holding them")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--ctar-subtask", default="math_reasoning", help="subtask of Figure 1(a) (default: %(default)s)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="plugin whose methods' declared defaults pick the main runs (repeatable)")


def cmd_report(args) -> int:
    if args.ctar_subtask not in SUBTASKS:
        raise UsageError(f"unknown subtask '{args.ctar_subtask}'; choose from {', '.join(SUBTASKS)}")
    rep = build_report(args.results, args.out, args.plugin, args.ctar_subtask)
    print(f"wrote {len(rep.made)} files to {rep.out}: {', '.join(rep.made)}")
    return 0
