"""Speedups that say when the output loops.

A small model often repeats itself, and a retrieval drafter (prompt lookup, Token Recycling,
Lookahead) then accepts long drafts copied from the loop: its speedup on degenerate text says
little about real text. So the report gives each subtask's share of looping turns, and Table 1
again on the turns that do not loop.

A turn loops when *vanilla's* output does (``metrics.loops`` on its token ids), so every method
is judged on the same turn set, whatever its own output did. A question keeps its other turns; the
statistics (the question stays the unit of resampling) are Table 1's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import metrics
from ..tasks.specbench import SUBTASKS
from .runs import SUBTASK_TITLES, Run
from .sections import Note, Section, Table
from .tables import table1


@dataclass(frozen=True)
class LoopRule:
    """When a turn loops: vanilla's ``loop_share`` with this n-gram is >= the threshold."""

    ngram: int = 8
    threshold: float = 0.3

    def definition(self) -> str:
        return (f"a turn loops when vanilla's output repeats itself: at >= {self.threshold:g} of its positions "
                f"i >= n (0-based) the {self.ngram}-gram ending at i already ended at an earlier position of "
                f"the same output (specharness/metrics.py, loop_share)")


def looping_turns(vanilla: Run, rule: LoopRule) -> dict | None:
    """{question id: 0-based turns whose output loops}; None when the file stores no token ids."""
    if not all(len(q.token_ids) == len(q.new_tokens) for q in vanilla.records):
        return None
    return {q.question_id: {t for t, ids in enumerate(q.token_ids) if metrics.loops(ids, rule.ngram, rule.threshold)}
            for q in vanilla.records}


def without_looping(runs: list[Run], loops: dict[str, dict]) -> list[Run]:
    """Each run judged by its vanilla baseline, its looping turns cut from every record (a question
    left with no turn is dropped); runs whose baseline could not be judged are left out."""
    out: dict[int, Run] = {}
    for r in runs:
        judge = loops.get(str(r.baseline.path)) if r.baseline is not None else None
        if judge is None:
            continue
        records = []
        for q in r.records:
            keep = set(range(len(q.new_tokens))) - judge.get(q.question_id, set())
            if keep:
                records.append(q.only_turns(keep))
        out[id(r)] = replace(r, records=records, cells={})
    for r in runs:
        if id(r) in out:
            out[id(r)].baseline = out.get(id(r.baseline))
    return [x for x in out.values() if x.records]


def share_table(vanillas: list[Run], loops: dict[str, dict], rule: LoopRule) -> Table:
    rows, data = [], {}
    many = len(vanillas) > 1
    for v in vanillas:
        judge = loops[str(v.path)]
        counts: dict[str, list[int]] = {}
        for q in v.records:
            c = counts.setdefault(q.subtask, [0, 0])
            c[0] += len(q.new_tokens)
            c[1] += len(judge.get(q.question_id, ()))
        counts["overall"] = [sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())]
        for s in [s for s in SUBTASKS if s in counts] + ["overall"]:
            turns, looping = counts[s]
            share = looping / turns if turns else float("nan")
            rows.append(([v.label] if many else []) + [SUBTASK_TITLES.get(s, "All"), str(turns), str(looping),
                                                       f"{100 * share:.1f}%"])
            data.setdefault(v.label, {})[s] = {"turns": turns, "looping": looping, "share": share}
        data[v.label]["looping_turns"] = sorted([str(q), t + 1] for q, ts in judge.items() for t in ts)
    caption = (f"Share of looping turns per subtask: {rule.definition()}. Methods are judged on vanilla's "
               "turns, so all of them lose the same turns in the table without looping turns.")
    header = (["Vanilla file"] if many else []) + ["Subtask", "Turns", "Looping turns", "Share"]
    return Table("looping", "Looping turns.", caption, header, rows,
                 {"ngram": rule.ngram, "threshold": rule.threshold, **data})


def looping(runs: list[Run], rule: LoopRule = LoopRule()) -> list[Section]:
    """The looping share per subtask, and Table 1 without the looping turns."""
    vanillas = sorted((r for r in runs if r.is_vanilla), key=lambda r: r.label)
    if not vanillas:
        return [Note("looping share not computed: no vanilla file, whose output decides which turns loop")]
    loops: dict[str, dict] = {}
    out: list[Section] = []
    for v in vanillas:
        judged = looping_turns(v, rule)
        if judged is None:
            out.append(Note(f"looping could not be computed for {v.label} (`{v.path.name}`): it stores no token "
                            "ids per turn (choices[0].token_ids); its methods have no table without looping turns"))
        else:
            loops[str(v.path)] = judged
    if not loops:
        return out
    out.append(share_table([v for v in vanillas if str(v.path) in loops], loops, rule))
    kept = without_looping(runs, loops)
    dropped = sum(len(ts) for judge in loops.values() for ts in judge.values())
    turns = sum(len(q.new_tokens) for v in vanillas if str(v.path) in loops for q in v.records)
    extra = (f" Without looping turns: the {dropped} of {turns} turns where vanilla's output loops "
             f"({rule.ngram}-grams, threshold {rule.threshold:g}; see Looping turns) are left out of every "
             "method; speedup and CR over the remaining turns, a question's time the median over its repeats "
             "of its remaining turns; Avg. over the subtasks that keep a turn.")
    out += table1(kept, name="table1_noloop", title="Table 1 without looping turns", label="speedup-noloop",
                  caption_extra=extra)
    return out
