"""The engine's contract checks and the documented paths that used to crash: each fails with one
line (or runs), never with a traceback or an unbounded wait."""

from __future__ import annotations

import json
import time

import pytest
import torch

from specharness.api import DecodeState, Proposal
from specharness.cli import main
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.model import TargetModel
from specharness.verify import Acceptance, greedy, speculative_sampling


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=16, n_layers=2, hidden_size=32, n_heads=4, n_kv_heads=2, seed=0)


class Scripted:
    """Proposes the given rounds in turn (then nothing)."""

    exit_layer = 0

    def __init__(self, rounds: list[Proposal]) -> None:
        self.rounds = rounds
        self.max_width = 8

    def begin(self, state: DecodeState, prefill_hidden) -> None:
        self.left = list(self.rounds)

    def propose(self, state: DecodeState) -> Proposal:
        return self.left.pop(0) if self.left else Proposal()

    def commit(self, state, verified) -> None:
        pass


def test_a_draft_outside_its_q_is_refused():
    logits = torch.randn(2, 8)
    q = torch.full((1, 8), 1 / 7)
    q[0, 3] = 0.0
    with pytest.raises(RuntimeError, match="probability 0 under the q"):
        speculative_sampling(logits, [3], q, 1.0, torch.Generator().manual_seed(0))


def test_a_tree_verified_without_a_path_is_refused(tiny):
    chain_only = lambda logits, drafts, q, t, g, **kw: Acceptance(0, int(logits[0].argmax()))  # noqa: E731
    tree = Scripted([Proposal([1, 2], parents=[0, 0])])
    with pytest.raises(RuntimeError, match="no path for a tree proposal"):
        generate(tiny, tree, chain_only, [1, 2, 3], 4)


def test_a_rejection_is_recorded_at_its_depth_on_the_path_taken(tiny):
    """Level (c) counts rejections at depth >= 2 on the path the round took. A depth-1 sibling
    accepted with nothing under it rejected nothing deeper; a wrong child under it is a rejection
    at depth 2."""
    v = tiny.greedy_continuation([1, 2, 3], 6)
    wrong = lambda t: (t + 1) % 16  # noqa: E731
    lone = generate(tiny, Scripted([Proposal([wrong(v[1]), v[1]], parents=[0, 0])]), greedy, [1, 2, 3], 6)
    r = lone.rounds[1]
    assert (r.drafted, r.accepted, r.rejected_at) == (2, 1, 0)
    deeper = generate(tiny, Scripted([Proposal([wrong(v[1]), v[1], wrong(v[2])], parents=[0, 0, 2])]), greedy,
                      [1, 2, 3], 6)
    r = deeper.rounds[1]
    assert (r.accepted, r.rejected_at) == (1, 2)
    chain = generate(tiny, Scripted([Proposal([v[1], wrong(v[2]), v[3]])]), greedy, [1, 2, 3], 6)
    r = chain.rounds[1]
    assert (r.accepted, r.rejected_at) == (1, 2)
    assert lone.token_ids == deeper.token_ids == chain.token_ids == v


def test_a_question_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    bad = tmp_path / "q.jsonl"
    bad.write_bytes(b'{"question_id": 1, "category": "qa", "turns": ["caf\xe9"]}\n')
    assert main(["run", "--method", "vanilla", "--bench-file", str(bad), "--baseline", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not UTF-8" in err[0]


def test_an_unknown_device_is_one_line(capsys):
    assert main(["lossless", "--method", "vanilla", "--levels", "greedy", "--device", "tpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown --device 'tpu'" in err[0]


def test_an_unreachable_ray_cluster_is_reported_within_seconds():
    from specharness.executors import check_reachable
    started = time.perf_counter()
    with pytest.raises(UsageError, match="no Ray cluster answers at 127.0.0.1:1"):
        check_reachable("127.0.0.1:1")
    assert time.perf_counter() - started < 10
    with pytest.raises(UsageError, match="HOST:PORT"):
        check_reachable("nowhere")
    check_reachable("auto")  # Ray's to resolve


# every method on its defaults, plus the option presets that change how it drafts (trees included)
PRESETS = [["vanilla"], ["pld"], ["recycling"], ["lookahead"], ["self-spec"], ["early_exit"], ["kangaroo"],
           ["eagle"], ["eagle", "-o", "mode=chain"], ["medusa"], ["medusa", "-o", "tree=chain"],
           ["medusa", "-o", "tree=mc_sim_7b_63"], ["hf-generate"], ["hf-prompt-lookup"], ["hf-assisted-early-exit"]]


@pytest.mark.parametrize("preset", PRESETS, ids=[" ".join(p) for p in PRESETS])
def test_every_method_runs_the_tiny_sampling_levels_or_says_why_in_one_line(preset, tmp_path, capsys):
    """recycling (top_k 8 over a 4-token vocabulary) and medusa's mc_sim_7b_63 tree (ranks past
    the vocabulary) crashed here. Tiny samples: this checks that each level runs, not its power."""
    out = tmp_path / "r.json"
    rc = main(["lossless", "--method", preset[0], *preset[1:], "--levels", "a,c", "--samples-a", "10",
               "--samples-c", "10", "--json", str(out), "--quiet"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    if rc == 2:
        assert len(err) == 1 and err[0].startswith("specharness: error:"), err
    else:
        assert rc in (0, 1) and set(json.loads(out.read_text())["levels"]) == {"a", "c"}


def test_a_greedy_only_method_says_so_before_the_sampling_levels(capsys):
    assert main(["lossless", "--method", "kangaroo-oracle", "--levels", "a,c"]) == 2
    assert "greedy only" in capsys.readouterr().err
