"""Data scaling: a drafter's held-out agreement and its CR against the conversations it trained on.

Issue 12 asks whether Kangaroo struggles at 135M for want of data or of depth. A run qualifies when
its header's ``drafter_info.training`` (copied by the drafter from its checkpoint's report.json,
``specharness.training.held_out_summary``) says how many conversations trained it; a method shows
when its runs cover at least two sizes. Held-out agreement comes from the trainer (one held-out set
for every size when trained with ``-o train_conversations``); CR comes from the run itself.
"""

from __future__ import annotations

import math
from collections import defaultdict

from .figures import error_bars, finish_panels, style
from .runs import Run, cell
from .sections import Figure, Note, Section, Table


def _trained_on(r: Run) -> dict:
    training = (r.meta.get("drafter_info") or {}).get("training") or {}
    return training if isinstance(training.get("train_conversations"), int) else {}


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def scaling_points(runs: list[Run]) -> dict[str, list[tuple[dict, Run]]]:
    """Per method, (training summary, run) sorted by training size; methods with one size left out."""
    by_method: dict[str, list[tuple[dict, Run]]] = defaultdict(list)
    for r in runs:
        if not r.is_vanilla and _trained_on(r):
            by_method[r.method].append((_trained_on(r), r))
    return {m: sorted(pts, key=lambda p: p[0]["train_conversations"]) for m, pts in sorted(by_method.items())
            if len({p[0]["train_conversations"] for p in pts}) >= 2}


def data_scaling(runs: list[Run]) -> list[Section]:
    """A table and a two-panel figure: held-out top-1 (own continuation and own prefix), and CR."""
    import matplotlib.pyplot as plt
    points = scaling_points(runs)
    if not points:
        return [Note("data-scaling section skipped: no method has runs of checkpoints trained on two or more "
                     "amounts of data (train with -o train_conversations=N and run each checkpoint)")]
    rows, data = [], {}
    for method, pts in points.items():
        for t, r in pts:
            c = cell(r, None)
            own = t.get("top1_own_prefix")
            gap = t["top1"] - own if isinstance(own, (int, float)) else float("nan")
            rows.append([method, str(t["train_conversations"]), str(t.get("held_out_conversations", "-")),
                         _pct(t["top1"]), _pct(own), _pct(gap), c.cr.fmt(2), c.speedup.fmt(2, "×")])
            data.setdefault(method, []).append({**t, "cr": c.cr.__dict__, "speedup": c.speedup.__dict__,
                                                "label": r.label, "path": str(r.path)})
    header = ["Method", "Training conv.", "Held-out conv.", "Top-1 (target's continuation)",
              "Top-1 (own prefix)", "Off-policy gap", "CR [95% CI]", "Speedup [95% CI]"]
    caption = ("Held-out top-1 agreement of the draft with the target's argmax, teacher-forced on the target's "
               "own continuation, and at depth 2 on the drafter's own prefix (among positions whose depth-1 draft "
               "agreed); the gap between them is the off-policy gap. A drafter that reads only the target's own "
               "states (Kangaroo) has no off-policy input: its depth-2 agreement is the teacher-forced one at the "
               "next position, on the positions its first draft got right, so it can exceed the first column. "
               "CR and speedup: this run, each checkpoint on the same questions.")
    fig, (ax_top1, ax_cr) = plt.subplots(1, 2, figsize=(9, 3.6))
    for i, (method, pts) in enumerate(points.items()):
        sizes = [t["train_conversations"] for t, _ in pts]
        st = style(2 * i)
        ax_top1.plot(sizes, [t["top1"] for t, _ in pts], **st, label=f"{method}: target's continuation")
        own = [t.get("top1_own_prefix") for t, _ in pts]
        if all(isinstance(x, (int, float)) for x in own):
            ax_top1.plot(sizes, own, **{**style(2 * i + 1), "marker": st["marker"]}, label=f"{method}: own prefix")
        crs = [cell(r, None).cr for _, r in pts]
        ax_cr.errorbar(sizes, [e.value for e in crs], yerr=error_bars(crs), capsize=3, **st, label=method)
    for ax in (ax_top1, ax_cr):
        ax.set_xscale("log", base=2)
    ax_top1.set_ylabel("held-out top-1 agreement")
    ax_cr.set_ylabel("CR (tokens per target forward)")
    finish_panels((ax_top1, ax_cr), ("Held-out top-1 agreement", "CR on the benchmark questions"),
                  "training conversations (log scale)")
    fig.tight_layout()
    return [Table("data_scaling", "Data scaling.", caption, header, rows, data),
            Figure("fig_data_scaling", fig)]  # its numbers are the table's (report.json: data_scaling)
