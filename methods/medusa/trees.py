"""Medusa's draft trees: each path lists, per depth, the rank of the token taken from that depth's
head (head d drafts the token d positions after the current one; its top-k list is shared by every
node at depth d). Paths are ordered by how likely they are to be accepted, so a prefix of a tree
is the best smaller tree.
"""

from __future__ import annotations

# The authors' default tree for Vicuna-7B (64 positions with the current token), as published in
# FasterDecoding/Medusa, medusa/model/medusa_choices.py (mc_sim_7b_63): data, not code.
MC_SIM_7B_63 = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4), (2, 0), (0, 5),
    (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8), (0, 0, 2), (3, 0), (0, 9), (8,), (9,),
    (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0), (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1),
    (0, 0, 6), (0, 3, 0), (5, 0), (1, 3), (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0),
    (0, 1, 2), (2, 0, 0), (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0),
    (0, 0, 0, 1), (1, 6), (0, 7, 0),
)
TREES = ("chain", "mc_sim_7b_63", "sized")


def paths(tree: str, heads: int, size: int) -> list[tuple[int, ...]]:
    """The paths of a named tree that ``heads`` heads can draft: 'chain' = each head's top token,
    'mc_sim_7b_63' = the authors' tree, 'sized' = its first ``size`` paths (the most likely ones:
    a tree sized to the machine's width curve)."""
    if tree == "chain":
        return [tuple([0] * d) for d in range(1, heads + 1)]
    chosen = [p for p in MC_SIM_7B_63 if len(p) <= heads]
    return chosen if tree == "mc_sim_7b_63" else chosen[:size]


def structure(tree_paths: list[tuple[int, ...]]) -> tuple[list[int], list[tuple[int, int]]]:
    """(parents, (depth, rank) per node) with parents before children; parents use the engine's
    numbering (0 = the current token, i = node i - 1). Every prefix of a path must be a path."""
    ordered = sorted(tree_paths, key=len)
    index = {p: i for i, p in enumerate(ordered)}
    parents = [0 if len(p) == 1 else index[p[:-1]] + 1 for p in ordered]
    return parents, [(len(p) - 1, p[-1]) for p in ordered]
