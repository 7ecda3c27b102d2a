"""The trainers' shared epoch loop: an interrupted run resumed gives the same weights as one that ran through."""

import pytest
import torch

from specharness import training
from specharness.errors import UsageError


class _Interrupt(Exception):
    pass


def _train(out, resume: bool, stop_after: int | None = None) -> torch.nn.Module:
    """Two epochs of 6 items; ``stop_after`` losses, the run is interrupted (as by Ctrl-C)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    data = [(torch.randn(5, 4, generator=torch.Generator().manual_seed(i)), torch.randn(5, 1)) for i in range(6)]
    options = {"lr": 1e-2, "weight_decay": 0.0, "seqs_per_step": 2, "epochs": 2, "seed": 3}
    opt, sched, _ = training.adamw_cosine(model.parameters(), options, len(data))
    state = training.claim_out_dir(out, resume)
    prog = training.Progress()

    calls = []

    def loss_of(conv):
        calls.append(1)
        if stop_after is not None and len(calls) > stop_after:
            raise _Interrupt
        x, y = conv
        noise = torch.rand(y.shape, generator=prog.rng)  # draws from the checkpointed generator
        return ((model(x) - y - noise) ** 2).sum()

    training.train_epochs(model, opt, sched, state, options, resume, list(range(6)),
                          data.__getitem__, lambda c: len(c[0]), loss_of, lambda: {"n": 1}, lambda ev: "ok",
                          "test", progress=prog)
    assert prog.epoch == 2 and len(prog.history) == 2
    return model


def test_resumed_run_matches_uninterrupted(tmp_path):
    through = _train(tmp_path / "a", resume=False)
    with pytest.raises(_Interrupt):
        _train(tmp_path / "b", resume=False, stop_after=8)  # in the second epoch: the first is saved
    with pytest.raises(UsageError, match="already holds"):
        _train(tmp_path / "b", resume=False)
    resumed = _train(tmp_path / "b", resume=True)
    assert torch.equal(through.weight, resumed.weight) and torch.equal(through.bias, resumed.bias)


def test_resume_needs_a_checkpoint(tmp_path):
    with pytest.raises(UsageError, match="--resume: no checkpoint"):
        training.claim_out_dir(tmp_path, resume=True)
