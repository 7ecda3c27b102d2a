"""The report's generic figures (paper Figure 1), as pure functions of the runs, and the styles
every figure shares (grey levels, markers and hatches that survive black-and-white printing)."""

from __future__ import annotations

import math

from .. import metrics
from .runs import SUBTASK_TITLES, Run, cell, subtasks_present
from .sections import Figure, Note, Section

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
LINESTYLES = ["-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
HATCHES = ["", "//", "\\\\", "xx", "..", "oo", "--", "++", "**", "||"]
GRAYS = ["0.0", "0.45", "0.7", "0.25", "0.6", "0.85", "0.15", "0.55"]


def style(i: int) -> dict:
    """Marker, grey and line style of the i-th series."""
    return dict(marker=MARKERS[i % len(MARKERS)], color=GRAYS[i % len(GRAYS)], linestyle=LINESTYLES[i % len(LINESTYLES)])


def error_bars(estimates) -> list[list[float]]:
    """[below, above] distances of each interval from its value (0 where there is no interval)."""
    return [[e.value - e.low if math.isfinite(e.low) else 0 for e in estimates],
            [e.high - e.value if math.isfinite(e.high) else 0 for e in estimates]]


def finish_panels(axes, titles, xlabel: str, legend_size: int = 6) -> None:
    """The same x label, a title each, a light grid and a small legend on every panel."""
    for ax, title in zip(axes, titles):
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)


def fig1a(runs: list[Run], subtask: str = "math_reasoning") -> list[Section]:
    """CTAR(w) curves of the main drafting runs on one subtask."""
    import matplotlib.pyplot as plt
    series = []
    for r in sorted((r for r in runs if r.main and not r.is_vanilla), key=lambda r: r.short):
        recs = r.subset(subtask)
        longest = metrics.longest_draft(recs)
        gamma = r.options.get("gamma")
        curve = metrics.ctar_curve(recs, max(longest, gamma if isinstance(gamma, int) else 0))
        if longest:
            series.append((r.short, curve))
    if not series:
        return [Note(f"Figure 1(a) skipped: no drafting method has rounds on {subtask}")]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for i, (label, curve) in enumerate(series):
        ax.plot(range(1, len(curve) + 1), curve, marker=MARKERS[i % len(MARKERS)],
                linestyle=LINESTYLES[i % len(LINESTYLES)], color=GRAYS[i % len(GRAYS)], label=label,
                markerfacecolor="white" if i % 2 else GRAYS[i % len(GRAYS)])
    ax.set_xlabel("w (draft tokens accepted in a round)")
    ax.set_ylabel("CTAR(w) (fraction of rounds)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"CTAR on {SUBTASK_TITLES.get(subtask, subtask)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return [Figure("fig1a_ctar", fig, dict(series), key="fig1a")]


def fig1b(runs: list[Run]) -> list[Section]:
    """Speedup bars with 95% intervals per subtask and averaged."""
    import matplotlib.pyplot as plt
    import numpy as np
    shown = sorted((r for r in runs if r.main and not r.is_vanilla and r.baseline is not None), key=lambda r: r.short)
    subs = subtasks_present(shown)
    if not shown or not subs:
        return [Note("Figure 1(b) skipped: no method with a matching vanilla baseline")]
    cols = subs + ["overall"]
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(cols) * max(1, len(shown)) / 2 + 2), 3.6))
    width = 0.8 / len(shown)
    x = np.arange(len(cols))
    for i, r in enumerate(shown):
        cs = [cell(r, s) for s in cols]
        ax.bar(x + (i - (len(shown) - 1) / 2) * width, [c.speedup.value for c in cs], width,
               yerr=error_bars([c.speedup for c in cs]), capsize=2, label=r.short,
               color=GRAYS[i % len(GRAYS)] if i % 3 else "white", edgecolor="black",
               hatch=HATCHES[i % len(HATCHES)], error_kw={"elinewidth": 0.8})
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(x, [SUBTASK_TITLES.get(s, "Avg.") if s != "overall" else "Avg." for s in cols])
    ax.set_ylabel("speedup over vanilla (×, 95% CI)")
    ax.set_xlabel("subtask")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(3, len(shown)))
    ax.grid(axis="y", alpha=0.3)
    return [Figure("fig1b_speedup", fig)]
