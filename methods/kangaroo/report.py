"""Kangaroo's report sections: the paper's Table 2 (adapter ablation), Figure 3(a) (exit layer),
Figure 3(b) (confidence threshold η, with the oracle stop), the oracle-vs-η and best-η tables.

Light on purpose: it imports the report framework and matplotlib, never torch or the drafter, so
``report`` runs from result files alone (entry-point group ``specharness.report``).

Which files go where, from their headers: Table 2 rows are ``kangaroo`` files that differ in an
option other than the sweep options (exit_layer, eta, gamma), those held at the main file's
values; Figure 3(a) takes files with >= 2 ``exit_layer`` values, Figure 3(b) files with >= 2
``eta`` values (one curve per ``gamma``) and the ``kangaroo-oracle`` files.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

from specharness import metrics
from specharness.hookspecs import hookimpl
from specharness.report.figures import error_bars, finish_panels, style
from specharness.report.runs import (SUBTASK_TITLES, Run, cell, fmt_speedup, fmt_value, mode,
                                     subtasks_present)
from specharness.report.sections import Figure, Note, Section, Table

SWEEP_KEYS = ("exit_layer", "eta", "gamma")
METHOD, ORACLE = "kangaroo", "kangaroo-oracle"
PAPER_ETA = 0.6  # the paper's default threshold, the reference of the oracle and best-η tables


def _anchor(group: list[Run]) -> dict:
    """Option values to hold fixed in sweeps and ablations: the main file's, else the most common."""
    mains = [r for r in group if r.main]
    keys = sorted({k for r in group for k in r.options} | set(SWEEP_KEYS))
    if len(mains) == 1:
        return {k: mains[0].options.get(k) for k in keys}
    return {k: mode(r.options.get(k) for r in group) for k in keys}


def _groups(runs: list[Run]) -> dict[tuple, list[Run]]:
    """Kangaroo files per temperature."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        if r.method == METHOD:
            groups[(r.method, r.temperature)].append(r)
    return groups


def table2(runs: list[Run]) -> list[Section]:
    rows_all = []
    for (method, t), group in sorted(_groups(runs).items()):
        keys = sorted({k for r in group for k in r.options} - set(SWEEP_KEYS))
        varying = [k for k in keys if len({json.dumps(r.options.get(k), sort_keys=True) for r in group}) > 1]
        if not varying:
            continue
        anchor = _anchor(group)
        rows = [r for r in group if all(r.options.get(k) == anchor[k] for k in SWEEP_KEYS)]
        if len(rows) < 2:
            continue
        info_keys = sorted({k for r in rows for k in (r.meta.get("drafter_info") or {})})
        for r in sorted(rows, key=lambda r: r.label):
            c = cell(r, "overall")
            extra = r.meta.get("extra_params")
            tp = r.meta.get("target_params")
            share = f"{100 * extra / tp:.2f}%" if extra is not None and tp else "-"
            variant = ", ".join(f"{k}={fmt_value(r.options.get(k))}" for k in varying)
            info = [str((r.meta.get("drafter_info") or {}).get(k, "-")) for k in info_keys]
            rows_all.append((info_keys, [method, variant, *info, f"{extra / 1e6:.3f}M" if extra is not None else "-",
                                         share, fmt_speedup(c), c.cr.fmt(2),
                                         f"{metrics.mean_draft_length(r.records):.2f}",
                                         f"{metrics.acceptance_rate(r.records):.3f}"]))
    if not rows_all:
        return [Note("Table 2 (ablation) skipped: no method has files that differ in an option other than "
                     "exit_layer/eta/gamma (e.g. kangaroo runs with different -o adapter=...)")]
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
    return [Table("table2", "Table 2.", caption, header, rows)]


def sweep(runs: list[Run], key: str) -> dict[str, list[Run]]:
    """Per method label: files differing in ``key``, other sweep options held at the anchor."""
    out = {}
    for (method, t), group in sorted(_groups(runs).items()):
        if len({r.options.get(key) for r in group if r.options.get(key) is not None}) < 2:
            continue
        anchor = _anchor(group)
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
            out[f"{method}" + (f" (T={t:g})" if len({x.temperature for x in runs}) > 1 else "")] = chosen
    return out


def fig3a(runs: list[Run]) -> list[Section]:
    import matplotlib.pyplot as plt
    sweeps = sweep(runs, "exit_layer")
    if not sweeps:
        return [Note("Figure 3(a) skipped: no method has files with >= 2 exit_layer values")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    data = {}
    for i, (name, group) in enumerate(sweeps.items()):
        group = sorted(group, key=lambda r: r.options["exit_layer"])
        ls = [r.options["exit_layer"] for r in group]
        cs = [cell(r, "overall") for r in group]
        st = style(i)
        axes[0].plot(ls, [c.cr.value for c in cs], label=name, **st)
        sp = [c.speedup for c in cs]
        axes[1].errorbar(ls, [e.value for e in sp], yerr=error_bars(sp), capsize=3, label=name, **st)
        acc = [metrics.acceptance_rate(r.records) for r in group]
        be = [metrics.break_even_acceptance(r.records, r.baseline.records) if r.baseline else float("nan")
              for r in group]
        be_full = [metrics.break_even_acceptance(r.records, r.baseline.records, full=True)
                   if r.baseline else float("nan") for r in group]
        axes[2].plot(ls, acc, label=f"{name}: measured", **st)
        axes[2].plot(ls, be, label=f"{name}: break-even (draft cost)", marker=st["marker"],
                     color=st["color"], linestyle=":", markerfacecolor="white")
        axes[2].plot(ls, be_full, label=f"{name}: break-even (full round cost)", marker="x",
                     color=st["color"], linestyle="--")
        data[name] = {"exit_layer": ls, "cr": [c.cr.value for c in cs], "speedup": [e.__dict__ for e in sp],
                      "acceptance": acc, "break_even_draft": be, "break_even_full": be_full}
    axes[1].axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes[0].set_ylabel("CR (tokens per target forward)")
    axes[1].set_ylabel("speedup over vanilla (×, 95% CI)")
    axes[2].set_ylabel("acceptance per drafted token (fraction)")
    finish_panels(axes, ["compression rate", "speedup", "acceptance vs break-even"],
                  "exit layer l (decoder layers before the draft head)")
    return [Figure("fig3a_exit_layer", fig, data, key="fig3a")]


def fig3b(runs: list[Run]) -> list[Section]:
    import matplotlib.pyplot as plt
    sweeps = sweep(runs, "eta")
    oracles = [r for r in runs if r.method == ORACLE]
    if not sweeps:
        return [Note("Figure 3(b) skipped: no method has files with >= 2 eta values")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    i = 0
    data, gamma_marker = {}, {}
    for name, group in sweeps.items():
        for g in sorted({r.options.get("gamma") for r in group}, key=lambda v: (v is None, v)):
            curve = sorted((r for r in group if r.options.get("gamma") == g), key=lambda r: r.options["eta"])
            etas = [r.options["eta"] for r in curve]
            cs = [cell(r, "overall") for r in curve]
            st = style(i)
            lab = f"{name}, γ={g}"
            gamma_marker.setdefault(str(g), st["marker"])
            axes[0].plot(etas, [c.cr.value for c in cs], label=lab, **st)
            sp = [c.speedup for c in cs]
            axes[1].errorbar(etas, [e.value for e in sp], yerr=error_bars(sp), capsize=3, label=lab, **st)
            data[lab] = {"eta": etas, "cr": [c.cr.value for c in cs], "speedup": [e.__dict__ for e in sp]}
            i += 1
    gammas = [str(v) for v in sorted({r.options.get("gamma") for r in oracles},
                                     key=lambda v: (v is None, str(v).zfill(8)))]
    for r in sorted(oracles, key=lambda r: (str(r.options.get("gamma")), r.label)):
        c = cell(r, "overall")
        g = str(r.options.get("gamma"))
        x = PAPER_ETA + 0.025 * (gammas.index(g) + 1)  # drawn just beside the paper's default eta
        st = dict(marker=gamma_marker.get(g, "*"), markersize=10, linestyle="none",
                  markerfacecolor="white", markeredgecolor="black", markeredgewidth=1.6, color="black")
        lab = f"oracle stop, γ={g} (drawn beside η={PAPER_ETA:g})"
        axes[0].plot([x], [c.cr.value], label=lab, **st)
        axes[1].errorbar([x], [c.speedup.value], yerr=error_bars([c.speedup]), capsize=3, label=lab, **st)
    axes[1].axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes[0].set_ylabel("CR (tokens per target forward)")
    axes[1].set_ylabel("speedup over vanilla (×, 95% CI)")
    finish_panels(axes, ("compression rate", "speedup"), "η (confidence threshold of the draft stop)")
    return [Figure("fig3b_eta", fig, data, key="fig3b")]


def oracle_table(runs: list[Run]) -> list[Section]:
    oracles = [r for r in runs if r.method == ORACLE]
    if not oracles:
        return [Note("oracle table skipped: no oracle-stop result file (method kangaroo-oracle)")]
    sweeps = sweep(runs, "eta")
    rows = []
    for o in sorted(oracles, key=lambda r: r.label):
        g = o.options.get("gamma")
        peer = None
        for group in sweeps.values():
            for r in group:
                if r.options.get("eta") == PAPER_ETA and (g is None or r.options.get("gamma") == g) \
                        and r.temperature == o.temperature:
                    peer = r
        if peer is None:  # a main file at the paper's eta also qualifies
            peer = next((r for r in runs if r.main and r.options.get("eta") == PAPER_ETA
                         and r.temperature == o.temperature and (g is None or r.options.get("gamma") == g)), None)
        co = cell(o, "overall")
        row = [o.label, str(g) if g is not None else "-", fmt_speedup(co), co.cr.fmt(2),
               f"{metrics.mean_draft_length(o.records):.2f}"]
        if peer is not None:
            cp = cell(peer, "overall")
            row += [peer.label, fmt_speedup(cp), cp.cr.fmt(2), f"{metrics.mean_draft_length(peer.records):.2f}"]
        else:
            row += ["(no η=0.6 file)", "-", "-", "-"]
        rows.append(row)
    header = ["Oracle file", "γ", "Oracle speedup", "Oracle CR", "Oracle draft len.",
              "η=0.6 file", "η=0.6 speedup", "η=0.6 CR", "η=0.6 draft len."]
    caption = ("Oracle stop (drafting stops exactly where the target first disagrees; an upper bound on "
               "any confidence stop) beside the confidence stop at η = 0.6, averages over subtasks.")
    return [Table("oracle_vs_eta", "Oracle vs η = 0.6.", caption, header, rows)]


def best_eta_table(runs: list[Run]) -> list[Section]:
    sweeps = sweep(runs, "eta")
    if not sweeps:
        return [Note("best-eta table skipped: no eta sweep")]
    rows = []
    for name, group in sweeps.items():
        for g in sorted({r.options.get("gamma") for r in group}, key=lambda v: (v is None, v)):
            curve = [r for r in group if r.options.get("gamma") == g and r.baseline is not None]
            if len(curve) < 2:
                continue
            for s in subtasks_present(curve) + ["overall"]:
                cs = [(r, cell(r, s)) for r in curve]
                cs = [(r, c) for r, c in cs if math.isfinite(c.speedup.value)]
                if not cs:
                    continue
                best, cb = max(cs, key=lambda rc: rc[1].speedup.value)
                at06 = next((c for r, c in cs if r.options.get("eta") == PAPER_ETA), None)
                rows.append([name, str(g), SUBTASK_TITLES.get(s, "Avg."), f"{best.options['eta']:g}",
                             fmt_speedup(cb), fmt_speedup(at06) if at06 else "-",
                             "yes" if at06 and cb.speedup.low > at06.speedup.high else "no"])
    if not rows:
        return [Note("best-eta table skipped: no eta sweep with a vanilla baseline")]
    header = ["Method", "γ", "Subtask", "Best η", "Speedup at best η", "Speedup at η=0.6",
              "Best beats 0.6 (CIs disjoint)"]
    caption = "Best confidence threshold η per subtask (highest speedup among the η values run)."
    return [Table("best_eta", "Best η per subtask.", caption, header, rows)]


@hookimpl
def specharness_report_sections(runs: list[Run]) -> list[Section]:
    return [*table2(runs), *fig3a(runs), *fig3b(runs), *oracle_table(runs), *best_eta_table(runs)]
