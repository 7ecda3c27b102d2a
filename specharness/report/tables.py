"""The report's generic tables, as pure functions of the runs: each returns its sections.

Method-specific tables (Kangaroo's ablation, sweeps, oracle) come from the method's own package
through the ``specharness_report_sections`` hook.
"""

from __future__ import annotations

import math

from .. import metrics, stats
from ..costmodel import ceilings as cost_ceilings
from ..costmodel import predict
from ..tasks.specbench import SUBTASKS
from .runs import QUICK_NOTE, SUBTASK_TITLES, Run, cell, fmt_cr, fmt_params, fmt_speedup, same_setting, subtasks_present
from .sections import Note, Section, Table


def _num(x, scale: float = 1.0, digits: int = 3) -> str:
    return f"{x * scale:.{digits}f}" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def table1(runs: list[Run], name: str = "table1", title: str = "Table 1", label: str = "speedup",
           caption_extra: str = "") -> list[Section]:
    """Speedup with its interval and CR, per subtask and averaged, one table per temperature. The
    name, title and caption's tail let the same table be built on another turn set (``looping``)."""
    out: list[Section] = []
    for t in sorted({r.temperature for r in runs}):
        rows_runs = sorted((r for r in runs if r.main and r.temperature == t), key=lambda r: (not r.is_vanilla, r.short))
        subs = subtasks_present(rows_runs)
        if not rows_runs or not subs:
            out.append(Note(f"{title} (T={t:g}) skipped: no main runs with questions"))
            continue
        if not any(r.baseline is not None for r in rows_runs if not r.is_vanilla):
            out.append(Note(f"{title} (T={t:g}): no vanilla file matches; speedups are blank"))
        header = ["Method", "Extra params"]
        group = [("", 1), ("", 1)]
        for s in subs + ["Avg."]:
            header += ["Speedup [95% CI]", "CR"]
            group.append((SUBTASK_TITLES.get(s, s), 2))
        rows, data = [], {}
        unstable = False
        for r in rows_runs:
            row = [r.short, fmt_params(r)]
            data[r.label] = {"extra_params": r.meta.get("extra_params")}
            for s in subs + ["overall"]:
                c = cell(r, s)
                unstable |= bool(c.unstable)
                row += [fmt_speedup(c), fmt_cr(c)]
                data[r.label][s] = {"speedup": c.speedup.__dict__, "cr": c.cr.__dict__, "n": c.n,
                                    "unstable_questions": c.unstable, "tokens_per_s": c.tokens_per_s}
            rows.append(row)
        van = [r for r in rows_runs if r.is_vanilla]
        caption = (f"Speedup over vanilla decoding (throughput ratio, 95% paired BCa bootstrap interval "
                   f"over questions) and compression rate CR (generated tokens per target forward) per "
                   f"subtask, temperature {t:g}. Avg. = mean over subtasks (stratified bootstrap).")
        if len(van) == 1:
            caption += f" Vanilla: {metrics.throughput(van[0].records):.1f} tokens/s."
        elif van:  # vanilla under several settings: each is some row's baseline
            caption += " Vanilla: " + "; ".join(f"{r.short} {metrics.throughput(r.records):.1f}" for r in van) + \
                " tokens/s."
        if min(len(r.subset(s)) for r in rows_runs for s in subs) < stats.MIN_QUESTIONS:
            caption += (f" Some cells hold fewer than {stats.MIN_QUESTIONS} questions: their intervals "
                        "are rough.")
        if unstable:
            caption += (f" † some question's timed repeats varied by more than {stats.CV_LIMIT:.0%} "
                        "(coefficient of variation), in this method or its vanilla baseline.")
        if any(r.quick for r in rows_runs):
            caption += QUICK_NOTE
        caption += caption_extra
        suffix = "" if t == 0 else f"_temp{t:g}"
        md_header = ["Method", "Extra params"] + [f"{SUBTASK_TITLES.get(s, s)} {h}" for s in subs + ["Avg."]
                                                  for h in ("speedup", "CR")]
        out.append(Table(f"{name}{suffix}", f"{title}{'' if t == 0 else f' (T={t:g})'}.", caption, header, rows,
                         data, md_header=md_header, group_header=group, label=f"tab:{label}{suffix}"))
    return out


def identity(runs: list[Run]) -> list[Section]:
    """Greedy files against their vanilla baseline, turn by turn: lossless is checked, not assumed.
    Where ``lossless --certify`` has been run on the directory, each divergence is shown as a
    certified near-tie or a bug."""
    import json
    rows, data = [], {}
    by_file: dict = {}  # verdicts by result file path
    by_label: dict = {}  # (directory, label): older certify files name no file
    for d in {r.path.parent for r in runs}:
        f = d / "identity_certified.json"
        if f.is_file():
            for label, c in json.loads(f.read_text()).items():
                if "file" in c:
                    by_file[d / c["file"]] = c
                else:
                    by_label[d, label] = c
    bound_based = any("tokens_compared" in c for c in [*by_file.values(), *by_label.values()])
    for r in sorted(runs, key=lambda r: r.label):
        if r.is_vanilla or r.baseline is None or r.temperature != 0:
            continue
        base = {q.question_id: q.token_ids for q in r.baseline.records}
        turns, differ, first = 0, 0, None
        for q in r.records:
            for t, (a, b) in enumerate(zip(q.token_ids, base.get(q.question_id, []))):
                turns += 1
                if a != b:
                    differ += 1
                    if first is None:
                        j = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                        first = f"question {q.question_id} turn {t + 1} token {j}"
        # by file name; files certified before the name was recorded, by label (an empty option value was
        # labelled 'adapter=' then, "adapter=''" now)
        d = r.path.parent
        c = by_file.get(r.path) or by_label.get((d, r.label)) or by_label.get((d, r.label.replace("=''", "=")))
        cert = [str(c["near_tie"]), str(c["bug"])] if c else ["-", "-"]
        if bound_based:  # certified against the float32 reference: how many tokens that covered
            cert.insert(0, str(c["tokens_compared"]) if c and "tokens_compared" in c else "-")
        rows.append([r.label, str(turns), str(turns - differ), *cert, first or "-"])
        data[r.label] = {"turns": turns, "identical": turns - differ, "first_difference": first, "certified": c}
    if not rows:
        return [Note("greedy identity table skipped: no greedy file with a vanilla baseline")]
    if bound_based:
        caption = ("Greedy outputs against vanilla's on the same questions, turn by turn (token ids). A "
                   "difference is a bug unless certified a near-tie by `specharness lossless --certify DIR`: at each "
                   "turn's first differing position both tokens sit within a fixed bound of the top logit of the "
                   "target's weights run in float32 by transformers (specharness/identity.py); tokens compared = "
                   "every token up to and including each turn's first difference ('-' = not certified).")
        header = ["File", "Turns", "Identical", "Tokens compared", "Near-ties (certified)", "Uncertified",
                  "First difference"]
    else:
        caption = ("Greedy outputs against vanilla's on the same questions, turn by turn (token ids). A "
                   "difference is a bug unless certified a float near-tie: `specharness lossless --certify DIR` "
                   "checks that both tokens at each first differing position sit within the tolerance of the "
                   "target's top logit, twice the kernel noise measured on the model (near-ties / bugs columns; "
                   "'-' = not certified).")
        header = ["File", "Turns", "Identical", "Near-ties (certified)", "Bugs (certified)", "First difference"]
    return [Table("identity", "Greedy identity.", caption, header, rows, data)]


def paired_tests(runs: list[Run]) -> list[Section]:
    """Every pair of main files (different methods, or one method's several main files), and every other
    setting of a method against that method's main file: a sweep's or an A/B's question-by-question test,
    not only its intervals. Only files of one run are paired (one command or one directory): times from
    two runs were not interleaved, and machines of one kind differ by more than the effects tested."""
    rows, data = [], {}

    def add(a: Run, b: Run, kind: str) -> None:
        one_run = a.path.parent == b.path.parent or (a.meta.get("command") and
                                                      a.meta.get("command") == b.meta.get("command"))
        if not one_run or not same_setting(a, b):
            return
        pt = stats.paired_test(a.records, b.records)
        if pt.n < 2:
            return
        rows.append([a.label, b.label, str(pt.n), f"{pt.a_over_b_speed:.3f}",
                     f"{pt.p_two_sided:.3g}", f"{pt.p_a_faster:.3g}"])
        data[f"{a.path} vs {b.path}"] = {"a": a.label, "b": b.label, "a_file": str(a.path), "b_file": str(b.path),
                                         "kind": kind, "questions": pt.n, "a_over_b_speed": pt.a_over_b_speed,
                                         "p_two_sided": pt.p_two_sided, "p_a_faster": pt.p_a_faster}

    for t in sorted({r.temperature for r in runs}):
        mains = [r for r in runs if r.main and r.temperature == t]
        for i, a in enumerate(mains):
            for b in mains[i + 1:]:
                add(*((b, a) if a.is_vanilla else (a, b)), "methods")
        for variant in (r for r in runs if not r.main and not r.is_vanilla and r.temperature == t):
            for main in (m for m in mains if m.method == variant.method):
                add(variant, main, "settings")
    if not rows:
        return [Note("paired tests skipped: fewer than two comparable methods with >= 2 shared questions")]
    caption = ("Wilcoxon signed-rank test on per-question log(time per token of A / time per token of B), "
               "all subtasks: every pair of methods (their main files), then every other setting of a method "
               "against its main file, within one run (command or directory). 'A/B speed' = speed ratio at the "
               "median question.")
    return [Table("paired_tests", "Paired tests.", caption,
                  ["A", "B", "questions", "A/B speed", "p (two-sided)", "p (A faster)"], rows, data, latex=False)]


def _overhead(r: Run) -> str:
    """Share of the run's time the per-round timing itself costs (header's measured cost per round)."""
    cost = r.meta.get("instrumentation_s_per_round")
    total = sum(q.time for q in r.records)
    if not isinstance(cost, (int, float)) or total <= 0:
        return "-"
    return f"{100 * cost * sum(q.forwards for q in r.records) / total:.2f}%"


def detail(runs: list[Run]) -> list[Section]:
    rows, data = [], {}
    for r in sorted((r for r in runs if r.main), key=lambda r: (not r.is_vanilla, r.short)):
        gamma = r.options.get("gamma")
        width = min(8, max(metrics.longest_draft(r.records), gamma if isinstance(gamma, int) else 0))
        for sub in [s for s in SUBTASKS if r.subset(s)] + ["overall"]:
            recs = r.subset(sub)
            c = cell(r, sub)
            tps = stats.throughput_ci(recs)
            ctar = metrics.ctar_curve(recs, width) if width else []
            stab = stats.unstable_timings(recs)
            rows.append([r.short, SUBTASK_TITLES.get(sub, "All"), str(len(recs)), tps.fmt(1), fmt_speedup(c),
                         c.cr.fmt(2), f"{metrics.mean_draft_length(recs):.2f}" if width else "-",
                         " ".join(f"{x:.2f}" for x in ctar) or "-",
                         f"{len(stab.unstable)}/{stab.questions}" + (f" (max CV {stab.max_cv:.0%})" if stab.unstable
                                                                      else "")])
            data.setdefault(r.label, {})[sub] = {"tokens_per_s": tps.__dict__, "ctar": ctar,
                                                 "mean_draft_length": metrics.mean_draft_length(recs),
                                                 "unstable": stab.unstable}
    if not rows:
        return [Note("detail table skipped: no main runs")]
    header = ["Method", "Subtask", "n", "Tokens/s [95% CI]", "Speedup [95% CI]", "CR [95% CI]",
              "Mean draft len.", "CTAR(1..γ)", "Unstable (CV > 10%)"]
    caption = ("Per subtask and overall ('All': tokens/s, CTAR and draft length pool every question; speedup "
               "and CR are means over subtasks, as in Table 1): throughput, speedup and CR with 95% bootstrap intervals, mean draft length, "
               "CTAR(w) for w = 1..γ, and questions whose timed repeats varied by more than 10%.")
    return [Table("detail", "Detail.", caption, header, rows, data)]


def acceptance(runs: list[Run]) -> list[Section]:
    drafting = sorted((r for r in runs if r.main and not r.is_vanilla and metrics.longest_draft(r.records)),
                      key=lambda r: r.short)
    if not drafting:
        return [Note("acceptance table skipped: no main run drafted any token")]
    width = min(max(metrics.longest_draft(r.records) for r in drafting), 8)
    header = ["Method", "Mean draft len.", "Accept. rate", *[f"CTAR({w})" for w in range(1, width + 1)],
              "Accept. by position", "Draft ms/token", "Verify ms/round", "Vanilla ms/step",
              "Break-even (draft)", "Break-even (full)", "Timing overhead"]
    rows, data = [], {}
    for r in drafting:
        tb = metrics.time_breakdown(r.records)
        base = r.baseline.records if r.baseline else []
        c_v = metrics.vanilla_step_cost(base) if base else float("nan")
        ctar = metrics.ctar_curve(r.records, width)
        by_pos = metrics.acceptance_by_position(r.records, width)
        be = metrics.break_even_acceptance(r.records, base) if base else float("nan")
        if not tb["draft_s"]:  # a decoder that times only whole rounds (transformers' peers)
            be = tb["draft_s_per_token"] = float("nan")
        be_full = metrics.break_even_acceptance(r.records, base, full=True) if base else float("nan")
        rows.append([r.short, _num(metrics.mean_draft_length(r.records), digits=2),
                     _num(metrics.acceptance_rate(r.records)), *[_num(c) for c in ctar],
                     " ".join(_num(x, digits=2) for x in by_pos), _num(tb["draft_s_per_token"], 1e3, 2),
                     _num(tb["verify_s_per_round"], 1e3, 2), _num(c_v, 1e3, 2), _num(be), _num(be_full), _overhead(r)])
        data[r.label] = {"ctar": ctar, "acceptance_by_position": by_pos, "break_even_draft": be,
                         "break_even_full": be_full, **tb, "vanilla_step_s": c_v}
    caption = ("Why: acceptance and cost per round, all subtasks. CTAR(w) = fraction of verification rounds "
               "accepting >= w drafts; acceptance by position = P(draft i accepted | drafts before it "
               "accepted); a drafted token pays only if accepted at least at the break-even rate "
               "(draft: draft cost per token / vanilla step; full: every extra second of a round counted).")
    return [Table("acceptance", "Acceptance and cost.", caption, header, rows, data)]


def sources(runs: list[Run]) -> list[Section]:
    """Every file whose rounds name their source (sam's match or fallback, pld's match length): which
    drafted how often, and what each kept and cost."""
    rows, data = [], {}
    for r in sorted(runs, key=lambda r: (r.short, r.label)):
        parts = metrics.by_source(r.records)
        for src, d in parts.items():
            rows.append([r.label, src or "(nothing drafted)", f"{100 * d['share']:.1f}%", _num(d["drafted"], digits=2),
                         _num(d["accepted"], digits=2), _num(d["acceptance"]), _num(d["draft_s"], 1e3, 2)])
        if parts:
            data[r.label] = parts
    if not rows:  # no drafter with sources here: nothing to say (no note either)
        return []
    header = ["File", "Proposer", "Rounds", "Drafts/round", "Kept/round", "Accept. rate", "Draft ms/round"]
    caption = ("Composite drafters: which part proposed each verification round (sam: its text's own match, the "
               "corpus's, or the fallback drafter), over all subtasks.")
    if any(src.endswith("-gram") for parts in data.values() for src in parts):
        caption += " pld: the n-gram length of its match."
    return [Table("sources", "Proposers.", caption, header, rows, data)]


def cost_model(runs: list[Run]) -> list[Section]:
    """Every file whose rounds were timed by the engine: the cost model's speedup beside the measured."""
    rows, data = [], {}
    for r in sorted(runs, key=lambda r: (r.short, r.label)):
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
        return [Note("cost-model table skipped: no engine-timed run with a vanilla baseline")]
    header = ["File", "Draft ms/step", "Draft ms/round (fixed)", "Verify ms by drafted k", "Bookkeeping ms/round",
              "Vanilla ms/step", "Draft step / vanilla step", "CR", "Predicted speedup", "Measured speedup",
              "Measured vs predicted"]
    caption = ("Cost model: per-round costs fitted over each file's rounds (draft = fixed + k × step; verify "
               "= one deep forward over k + 1 positions, mean ms shown by k; bookkeeping = accept) and its own "
               "rounds' draft lengths predict its time; vanilla = prefill + one step per token. ‡ measured "
               "differs from predicted by more than 10%: unexplained overhead or drift.")
    return [Table("cost_model", "Cost model.", caption, header, rows, data)]


def _profiled(runs: list[Run], model, profile):
    """(run, what ``model`` says of it from the profile) for every non-vanilla run with a baseline that
    the profile can speak for."""
    for r in sorted(runs, key=lambda r: (r.short, r.label)):
        if not r.is_vanilla and r.baseline is not None:
            got = model(r.records, r.meta, r.baseline.records, profile, r.baseline.meta)
            if got is not None:
                yield r, got


def cost_model_profile(runs: list[Run], profile) -> list[Section]:
    """Each file's speedup predicted from an engine profile measured apart from it (``costmodel``)."""
    rows, data = [], {}
    for r, got in _profiled(runs, predict, profile):
        gap = got["gap"]
        rows.append([r.label, got["config"], f"{metrics.compression_rate(r.records):.2f}",
                     f"{got['predicted_vanilla_ms_per_token']:.1f}", f"{got['measured_vanilla_ms_per_token']:.1f}",
                     f"{got['predicted_speedup']:.3f}×", f"{got['measured_speedup']:.3f}×",
                     f"{100 * gap:+.1f}%" + (" ‡" if abs(gap) > 0.10 else "")])
        data[r.label] = got
    if not rows:
        return [Note("profile cost model skipped: no file whose configuration, drafter and forward widths the "
                     "profile covers")]
    header = ["File", "Ran on", "CR", "Vanilla ms/token (profile)", "Vanilla ms/token (measured)",
              "Predicted speedup", "Measured speedup", "Measured vs predicted"]
    caption = (f"Speedup predicted from the engine profile ({profile.data.get('cpu', '?')}, "
               f"{profile.data.get('created', '?')}; forward cost by width and context, drafter step costs, "
               "bookkeeping; for transformers' generate and its peers, transformers' eager forward, generate's "
               "per-step overhead and the peer's costs per round and per drafted token) and each file's own rounds "
               "(draft sizes, widths, contexts), beside the measured one. ‡ more than 10% apart.")
    return [Table("cost_model_profile", "Cost model (profile).", caption, header, rows, data)]


def ceilings(runs: list[Run], profile) -> list[Section]:
    """Where each method's time goes, as speedups: measured, predicted from the profile, then with its
    drafting free, then with verification as cheap as a one-position step too (``costmodel.ceilings``).
    A goal above the last column needs more acceptance; above the middle one, a flatter width curve."""
    rows, data = [], {}
    for r, got in _profiled(runs, cost_ceilings, profile):
        rows.append([r.label + got["drafter_profiled_at"], f"{metrics.compression_rate(r.records):.2f}",
                     f"{got['measured']:.3f}×", f"{got['predicted']:.3f}×", f"{got['free_drafting']:.3f}×",
                     f"{got['flat_verification']:.3f}×"])
        data[r.label] = got
    if not rows:
        return []
    header = ["File", "CR", "Measured speedup", "Predicted (profile)", "Drafting free",
              "Drafting free, flat verification"]
    caption = ("What each method's own rounds (draft sizes, widths, acceptance) would run at on the profiled "
               "machine: as profiled; with drafting free (no drafting time, vanilla's bookkeeping per round); and "
               "with every verification also costing a one-position step (or less). Predicted to drafting free: what "
               "the drafter and its bookkeeping cost; drafting free to flat: what the machine's width curve costs; "
               "the last column: what the acceptance alone allows. Speedups pooled over the questions (all tokens "
               "over all time), as in the cost models, not Table 1's mean over subtasks.")
    return [Table("ceilings", "Ceilings.", caption, header, rows, data)]


def hardware(runs: list[Run]) -> list[Section]:
    """Which hardware measured each file (result records name it); a file that mixes hardware is
    warned about, and its throughput shown per hardware group."""
    rows, notes = [], []
    for r in sorted(runs, key=lambda r: r.label):
        groups: dict[str, list] = {}
        for q in r.records:
            w = q.worker or {}
            key = f"{w.get('node', '?')} / {w.get('device', '?')} / {w.get('threads', '?')} threads" if w else "not recorded"
            groups.setdefault(key, []).append(q)
        if len(groups) > 1:
            notes.append(Note(f"{r.label} mixes hardware ({len(groups)} kinds): its speedups pair each question with "
                              "vanilla on the same worker only if the baseline file ran there too; see hardware.md"))
        for key, recs in groups.items():
            rows.append([r.label, key, str(len(recs)), f"{metrics.throughput(recs):.2f}"])
    if not rows or all(row[1] == "not recorded" for row in rows):
        return []
    caption = "The hardware behind every file (node / device / threads), with each group's questions and tokens/s."
    return [*notes, Table("hardware", "Hardware.", caption, ["File", "Hardware", "Questions", "Tokens/s"], rows)]

