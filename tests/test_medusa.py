"""medusa: greedy == vanilla with untrained heads, sampling lossless, official checkpoint layout."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from specharness import selfdistill
from specharness.methods.medusa.checkpoint import load_heads, save_heads
from specharness.methods.medusa.drafter import MedusaDrafter
from specharness.methods.medusa.heads import MedusaHeads, random_heads
from specharness.methods.vanilla import NoDraft
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.plugins import build_registry
from specharness.runner import Settings, build_method
from specharness.model import TargetModel
from specharness.verify import greedy, speculative_sampling
from test_early_exit import (NEW_TOKENS, PROMPT, SAMPLES, assert_same_or_near_tie, chi_square_p,
                             exact_marginals)


def official_init(target, n_heads: int) -> MedusaHeads:
    """Heads exactly as Medusa-1 starts training: identity blocks, LM heads copied from the target."""
    return MedusaHeads(target.hidden_size, target.vocab_size, n_heads, 1, own_head=True,
                       init_head=target.head_weight).eval().requires_grad_(False)


@pytest.fixture(scope="module")
def prompts(smol, first_questions):
    return [(q.subtask, smol.chat_ids([{"role": "user", "content": q.turns[0]}])) for q in first_questions]


def test_greedy_equals_vanilla_on_every_subtask_with_untrained_heads(smol, vanilla_greedy, prompts):
    # at the heads' own size: sizing (budget=auto, the default) keeps vanilla's tokens in test_budget, and
    # calibrating it here would time every size for every variant
    reg, rand = build_registry(), ["budget=max", "heads_path=random"]
    variants = [  # one per subtask: heads through the registered method, and in-memory ones
        ("random heads=4 (default)", lambda: build_method(reg, "medusa", rand, smol, 0.0)),
        ("random heads=1", lambda: build_method(reg, "medusa", [*rand, "heads=1"], smol, 0.0)),
        ("official init heads=2", lambda: MedusaDrafter(smol, official_init(smol, 2))),
        ("random heads=3", lambda: build_method(reg, "medusa", [*rand, "heads=3"], smol, 0.0)),
        ("random 2-block heads=5", lambda: MedusaDrafter(smol, random_heads(smol, 5, n_layers=2))),
        ("random heads=2", lambda: build_method(reg, "medusa", [*rand, "heads=2"], smol, 0.0)),
    ]
    assert len(prompts) == len(variants)
    s = Settings(max_new_tokens=NEW_TOKENS)
    for (subtask, ids), (label, make) in zip(prompts, variants):
        ref = vanilla_greedy(ids, NEW_TOKENS)
        m = make()
        out = m.generate(ids, s, 0) if hasattr(m, "generate") else generate(smol, m, greedy, ids, NEW_TOKENS)
        assert len(out.token_ids) == len(ref) and sum(r.drafted for r in out.rounds) > 0
        assert_same_or_near_tie(smol, ids, ref, out.token_ids, f"medusa {label} on {subtask}")


def test_head_k_drafts_k_tokens_ahead(smol, vanilla_greedy):
    """With the target's own head on an identity block, head 1 repeats the current token's
    prediction: on a text that repeats itself, drafts are accepted (the offsets line up)."""
    ids = smol.chat_ids([{"role": "user", "content": "Repeat exactly, ten times: 'a a a a a a a a'"}])
    out = generate(smol, MedusaDrafter(smol, official_init(smol, 1)), greedy, ids, 24)
    assert out.token_ids == vanilla_greedy(ids, 24)
    assert sum(r.accepted for r in out.rounds) > 0


def test_no_heads_says_how_to_train(smol, monkeypatch, tmp_path, capsys):
    from specharness.cli import main
    from specharness.methods.medusa import drafter as medusa_drafter
    monkeypatch.setattr(medusa_drafter, "heads_dir_for", lambda target, lm_head="shared": tmp_path / "none")
    with pytest.raises(UsageError) as err:
        build_method(build_registry(), "medusa", [], smol, 0.0)
    assert "python -m specharness train medusa" in str(err.value) and "\n" not in str(err.value)
    rc = main(["run", "--method", "medusa", "--subtasks", "qa", "--limit", "1", "--max-new-tokens", "4",
               "--out", str(tmp_path / "r.jsonl")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "train medusa" in lines[-1] and lines[-1].startswith("specharness: error:")


# ---- the official Medusa-1 checkpoint layout (tiny config) ----------------------------------------
@pytest.fixture(scope="module")
def tiny():
    target = TargetModel.tiny("llama", vocab_size=16, n_layers=4, seed=11)
    return target, exact_marginals(target, PROMPT, 3)


def write_official(directory, target, n_heads=3, n_layers=1, own_head=True, seed=0, fmt="pt", config=True):
    """A checkpoint written the way Medusa's training script saves it (state dict of the head list)."""
    g = torch.Generator().manual_seed(seed)
    H, V = target.hidden_size, target.vocab_size
    sd = {}
    for i in range(n_heads):
        for j in range(n_layers):
            sd[f"{i}.{j}.linear.weight"] = torch.randn(H, H, generator=g) * 0.1
            sd[f"{i}.{j}.linear.bias"] = torch.randn(H, generator=g) * 0.1
        if own_head:
            sd[f"{i}.{n_layers}.weight"] = target.head_weight + torch.randn(V, H, generator=g) * 0.1
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "pt":
        torch.save(sd, directory / "medusa_lm_head.pt")
    else:
        from safetensors.torch import save_file
        save_file(sd, str(directory / "medusa_lm_head.safetensors"))
    if config:
        (directory / "config.json").write_text(json.dumps({
            "medusa_num_heads": n_heads, "medusa_num_layers": n_layers,
            "base_model_name_or_path": "tiny", "transformers_version": "4.34.0"}))
    return sd


def manual_logits(sd, target, h, n_heads, n_layers, own_head):
    out = []
    for i in range(n_heads):
        x = h
        for j in range(n_layers):
            x = x + F.silu(x @ sd[f"{i}.{j}.linear.weight"].T + sd[f"{i}.{j}.linear.bias"])
        w = sd[f"{i}.{n_layers}.weight"] if own_head else target.head_weight
        out.append(x @ w.T)
    return torch.stack(out)


@pytest.mark.parametrize("n_layers, own_head, fmt", [(1, True, "pt"), (2, True, "safetensors"), (1, False, "pt")])
def test_official_layout_loads_and_runs(tiny, tmp_path, n_layers, own_head, fmt):
    target, _ = tiny
    sd = write_official(tmp_path, target, 3, n_layers, own_head, fmt=fmt)
    reg = build_registry()
    m = build_method(reg, "medusa", [f"heads_path={tmp_path}", "heads=3"], target, 0.0)
    heads = load_heads(tmp_path, target, 3)
    assert heads.own_head == own_head and heads.n_layers == n_layers and heads.n_heads == 3
    assert m.extra_params == sum(v.numel() for v in sd.values())
    h = torch.randn(5, target.hidden_size)
    assert torch.allclose(heads.logits(h, target), manual_logits(sd, target, h, 3, n_layers, own_head), atol=1e-5)
    ref = generate(target, NoDraft(), greedy, PROMPT, 40).token_ids
    out = m.generate(PROMPT, Settings(max_new_tokens=40), 0)
    assert out.token_ids == ref and sum(r.drafted for r in out.rounds) > 0
    # fewer heads than stored: the first ones are used
    assert build_method(reg, "medusa", [f"heads_path={tmp_path / ('medusa_lm_head.' + fmt)}", "heads=2"],
                        target, 0.0).extra_params < m.extra_params


def test_an_empty_heads_path_means_the_shipped_shared_heads_else_the_trained_ones(tiny, tmp_path, monkeypatch):
    """lm_head=shared (the default) runs the heads shipped for the model; a model with none shipped, or
    lm_head=own, the heads 'train medusa' cached; none anywhere: one line saying how to train them."""
    from specharness.methods.medusa import checkpoint
    target, _ = tiny
    monkeypatch.setattr(checkpoint, "HEADS_ROOT", tmp_path / "shipped")
    monkeypatch.setenv("SPECHARNESS_CACHE", str(tmp_path / "cache"))
    reg = build_registry()
    with pytest.raises(UsageError, match="train medusa"):
        build_method(reg, "medusa", ["heads=2"], target, 0.0)
    write_official(checkpoint.default_heads_dir(target, "shared"), target, 2, own_head=False, seed=1)
    trained = build_method(reg, "medusa", ["heads=2"], target, 0.0)
    sd = write_official(checkpoint.shipped_heads_dir(target), target, 2, own_head=False, seed=2)
    shipped = build_method(reg, "medusa", ["heads=2"], target, 0.0)
    h = torch.randn(3, target.hidden_size)
    got = load_heads(checkpoint.heads_dir_for(target, "shared"), target, 2).logits(h, target)
    assert torch.allclose(got, manual_logits(sd, target, h, 2, 1, False), atol=1e-5)  # the shipped weights
    assert shipped.info["heads"] != trained.info["heads"]  # the header names which heads ran
    with pytest.raises(UsageError, match="train medusa"):  # own heads never ship
        build_method(reg, "medusa", ["heads=2", "lm_head=own"], target, 0.0)


def test_our_saved_heads_round_trip(tiny, tmp_path):
    """What 'train medusa' writes is the official layout, and loads back to the same logits."""
    target, _ = tiny
    heads = official_init(target, 3)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in heads.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    save_heads(heads, tmp_path, target, {"note": "test"})
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["medusa_num_heads"] == 3 and cfg["medusa_num_layers"] == 1
    assert set(torch.load(tmp_path / "medusa_lm_head.pt", weights_only=True)) == {
        f"{i}.{k}" for i in range(3) for k in ("0.linear.weight", "0.linear.bias", "1.weight")}
    back = load_heads(tmp_path, target)
    h = torch.randn(2, target.hidden_size)
    assert torch.allclose(back.logits(h, target), heads.logits(h, target))


@pytest.mark.parametrize("make, needle", [
    (lambda d, t: write_official(d, t, 2), "only 2 head"),  # heads=4 asked for
    (lambda d, t: write_official(d, TargetModel.tiny("llama", vocab_size=16, hidden_size=32, n_layers=2)),
     "hidden size 32"),
    (lambda d, t: write_official(d, TargetModel.tiny("llama", vocab_size=20, n_layers=2)), "vocabulary of 20"),
    (lambda d, t: (d.mkdir(), (d / "medusa_lm_head.pt").write_bytes(b"not a checkpoint")), "cannot read"),
    (lambda d, t: (d.mkdir(), torch.save({"x": torch.zeros(1), "f": F.silu}, d / "medusa_lm_head.pt")),
     "cannot read"),  # a pickled function: weights_only refuses to run it
    (lambda d, t: d.mkdir(), "holds no medusa_lm_head"),
    (lambda d, t: None, "does not exist"),
])
def test_bad_checkpoints_are_one_line_errors(tiny, tmp_path, make, needle):
    target, _ = tiny
    d = tmp_path / "ckpt"
    make(d, target)
    with pytest.raises(UsageError) as err:
        build_method(build_registry(), "medusa", [f"heads_path={d}"], target, 0.0)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("opts, needle", [(["heads=0"], "heads"), (["heads=x"], "heads"),
                                          (["gamma=3"], "no option 'gamma'"), (["tree=bushy"], "is not one of"),
                                          (["tree_size=99"], "outside")])
def test_bad_options_are_one_line_usage_errors(tiny, opts, needle):
    target, _ = tiny
    with pytest.raises(UsageError) as err:
        build_method(build_registry(), "medusa", ["heads_path=random", *opts], target, 0.0)
    assert needle in str(err.value) and "\n" not in str(err.value)


# ---- sampling ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["random-shared-head", "official-own-head"])
def test_sampling_is_lossless(tiny, tmp_path, kind):
    """Drafts are sampled from each head's own distribution, handed over as q; tokens 2 and 3
    (the first verified round, 2 heads used) must follow the exact target distribution."""
    target, marg = tiny
    if kind == "random-shared-head":
        heads = random_heads(target, 3)
    else:
        write_official(tmp_path, target, 3, 1, own_head=True, seed=3)
        heads = load_heads(tmp_path, target, 3)
    outs, drafted, accepted = [], 0, 0
    for seed in range(SAMPLES):
        g = generate(target, MedusaDrafter(target, heads), speculative_sampling, PROMPT, 4, 1.0, seed)
        outs.append(g.token_ids)
        drafted += sum(r.drafted for r in g.rounds)
        accepted += sum(r.accepted for r in g.rounds)
    assert 0.05 * drafted < accepted < 0.95 * drafted
    for j in (1, 2):
        p = chi_square_p([o[j] for o in outs], marg[j])
        assert p > 1e-3, f"{kind} token {j + 1}: chi-square p = {p:.2e} against the exact target distribution"


# ---- trees --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tree", ["sized", "mc_sim_7b_63"])
def test_tree_greedy_equals_vanilla(smol, vanilla_greedy, prompts, tree):
    reg = build_registry()
    m = build_method(reg, "medusa", ["budget=max", "heads_path=random", f"tree={tree}"], smol, 0.0)
    s = Settings(max_new_tokens=NEW_TOKENS)
    widths = set()
    for subtask, ids in prompts[:3]:
        ref = vanilla_greedy(ids, NEW_TOKENS)
        out = m.generate(ids, s, 0)
        widths |= {r.width for r in out.rounds[1:]}
        assert_same_or_near_tie(smol, ids, ref, out.token_ids, f"medusa tree={tree} on {subtask}")
    assert max(widths) == (8 if tree == "sized" else 64)  # the whole tree in one forward


def test_tree_paths_follow_the_authors_ranks():
    from specharness.methods.medusa.trees import MC_SIM_7B_63, paths, structure
    assert len(MC_SIM_7B_63) == 63 and len(paths("mc_sim_7b_63", 4, 7)) == 63
    parents, picks = structure(paths("sized", 4, 7))
    assert len(parents) == 7 and all(p <= i for i, p in enumerate(parents))
    assert picks[:2] == [(0, 0), (0, 1)] and paths("chain", 3, 7) == [(0,), (0, 0), (0, 0, 0)]


def test_tree_sampling_is_lossless(tiny):
    """A sized tree (deterministic nodes, point-mass acceptance over siblings): tokens 2 and 3 must
    follow the exact target distribution."""
    target, marg = tiny
    heads = random_heads(target, 3)
    d = MedusaDrafter(target, heads, "sized", 7)
    outs, accepted = [], 0
    for seed in range(SAMPLES):
        g = generate(target, d, speculative_sampling, PROMPT, 4, 1.0, seed)
        outs.append(g.token_ids)
        accepted += sum(r.accepted for r in g.rounds)
    assert accepted > 50
    for j in (1, 2):
        assert chi_square_p([o[j] for o in outs], marg[j]) > 1e-3


# ---- the trainer (tiny model, data in the shared self-distillation format) ---------------------------
def write_selfdistill_data(target, directory, settings, n_rows=24, answer=24, seed=0):
    """Conversations the tiny target 'wrote' (greedy answers to random prompts), stored exactly as
    ``specharness.selfdistill.generate`` stores them, so the trainer goes through its real loader."""
    import datasets
    from dataclasses import asdict

    from specharness import selfdistill
    g = torch.Generator().manual_seed(seed)
    cols = {"input_ids": [], "prompt_len": [], "loss_mask": [], "user": [], "stop": []}
    prompts = torch.randint(0, target.vocab_size, (n_rows, 5), generator=g)
    with torch.no_grad():  # one batched greedy generate (same-length prompts: no padding)
        seqs = target.hf.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                                  max_new_tokens=answer, min_new_tokens=answer, pad_token_id=0).tolist()
    for prompt, seq in zip(prompts.tolist(), seqs):
        mask = [0] * len(seq)
        for t in range(len(prompt) - 1, len(seq) - 1):
            mask[t] = 1
        for k, v in (("input_ids", seq), ("prompt_len", len(prompt)), ("loss_mask", mask), ("user", "-"),
                     ("stop", "length")):
            cols[k].append(v)
    datasets.Dataset.from_dict(cols).save_to_disk(str(directory / "data"))
    (directory / "generation.json").write_text(json.dumps({
        "format": selfdistill.FORMAT_VERSION, "model": selfdistill.model_identity(target),
        "settings": {**asdict(settings), "capture_layers": []}, "conversations": n_rows,
        "tokens": sum(map(len, cols["input_ids"])), "answer_tokens": n_rows * answer,
        "wall_time_s": {"total": 1.0}, "flops": {"total": 1.0}}))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from specharness.methods.medusa import train as medusa_train
    from specharness.options import resolve_options
    target = TargetModel.tiny("llama", vocab_size=32, n_layers=2, seed=21)
    data = tmp_path_factory.mktemp("selfdistill")
    opts = resolve_options("medusa", medusa_train.OPTIONS, {
        "heads": "3", "epochs": "4", "batch": "32", "lr": "0.01", "held_out": "0.2", "max_minutes": "0",
        "conversations": "32", "max_answer_tokens": "24", "data": str(data), "bf16": "false",
        "lm_head": "own"})  # Medusa-1's layout (the trainer's default is the shipped kind, shared)
    write_selfdistill_data(target, data, selfdistill.recipe(opts), n_rows=32)
    return target, opts, medusa_train


def test_trainer_learns_saves_official_layout_and_reports(trained, tmp_path):
    target, opts, medusa_train = trained
    report = medusa_train.run(target, opts, tmp_path / "heads", resume=False, progress=False)
    assert report["completed"] and not report["stopped_by_budget"]
    assert report["data"]["conversations"] == 32 and report["wall_time_s"]["data_reused"]
    H, V = target.hidden_size, target.vocab_size
    assert report["parameters"] == 3 * (H * H + H + V * H)
    assert report["flops"]["teacher"] > 0 and report["flops"]["train"] > 0
    assert report["wall_time_s"]["train"] > 0
    hist = json.loads((tmp_path / "heads" / "report.json").read_text())
    assert hist["steps"] == report["total_steps"] > 3
    assert len(report["held_out_top1_agreement_per_head"]) == 3
    # what a result header quotes of the heads it ran (``training.checkpoint_summary``): head 1's agreement
    assert hist["held_out_summary"]["top1"] == report["held_out_top1_agreement_per_head"][0]
    teacher = torch.load(tmp_path / "heads" / medusa_train.TEACHER_FILE, weights_only=True)
    fitted = medusa_train.evaluate(load_heads(tmp_path / "heads", target), target, teacher["train"], False)
    untrained = medusa_train.evaluate(official_init(target, 3), target, teacher["train"], False)
    assert all(a > b + 0.05 for a, b in zip(fitted, untrained)), (fitted, untrained)
    assert not (tmp_path / "heads" / medusa_train.STATE_FILE).exists()  # finished: no resumable state left
    # the heads load through the method, run losslessly, and draft better than untrained ones
    reg = build_registry()
    m = build_method(reg, "medusa", [f"heads_path={tmp_path / 'heads'}", "heads=3"], target, 0.0)
    prompt = [1, 2, 3, 4, 5]
    ref = generate(target, NoDraft(), greedy, prompt, 40).token_ids
    out = m.generate(prompt, Settings(max_new_tokens=40), 0)
    assert out.token_ids == ref and sum(r.drafted for r in out.rounds) > 0


def test_trainer_targets_line_up_with_the_offsets(trained):
    """Teacher position j holds the target's distribution of the token after j (== the greedy data's
    next token); head k at j is trained on position j + k, i.e. the token k + 1 after h_j's own."""
    target, opts, medusa_train = trained
    from specharness import selfdistill
    ds, _ = selfdistill.load(opts["data"])
    f = medusa_train.teacher_features(target, ds, [0], 3, 4, progress=False)
    ids, P = ds[0]["input_ids"], ds[0]["prompt_len"]
    a = P - 1 - 3  # three heads: stored from three positions before the first trained one
    n = int(f["row_end"][0])
    assert n == len(ids) - 1 - a
    for j in range(n):
        assert int(f["ids"][j, 0]) == (ids[a + j + 1] if a + j >= P - 1 else -1)
    valid = medusa_train.valid_targets(f, 3)
    for k in (1, 2, 3):
        assert valid[k - 1].nonzero()[:, 0].tolist() == list(range(P - 1 - a - k, n - k))


def test_trainer_resumes_after_an_interrupt(trained, tmp_path, monkeypatch):
    target, opts, medusa_train = trained
    straight = medusa_train.run(target, opts, tmp_path / "a", resume=False, progress=False)
    real, calls = medusa_train.head_losses, {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(medusa_train, "head_losses", flaky)
    with pytest.raises(KeyboardInterrupt):
        medusa_train.run(target, opts, tmp_path / "b", resume=False, progress=False)
    assert torch.load(tmp_path / "b" / medusa_train.STATE_FILE, weights_only=True)["step"] == 3
    with pytest.raises(UsageError, match="--resume"):  # never silently overwrite a run in progress
        medusa_train.run(target, opts, tmp_path / "b", resume=False, progress=False)
    monkeypatch.setattr(medusa_train, "head_losses", real)
    resumed = medusa_train.run(target, opts, tmp_path / "b", resume=True, progress=False)
    assert resumed["steps"] == straight["steps"]
    a = torch.load(tmp_path / "a" / "medusa_lm_head.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "medusa_lm_head.pt", weights_only=True)
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
