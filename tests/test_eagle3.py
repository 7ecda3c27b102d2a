"""EAGLE-3: the training-time test unrolls exactly what drafting computes, greedy identity with vanilla
(the head's captured layers reach it through verification and the prefill), lossless sampling, bad
options as one-line errors, the trainer end to end on a tiny model, and sam's eagle3 fallback."""

from __future__ import annotations

import json

import pytest
import torch

from specharness import selfdistill as sd
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.methods.eagle.train import Conversations, run_head
from specharness.methods.eagle3 import drafter as e3
from specharness.methods.eagle3 import train as e3t
from specharness.methods.eagle3.head import Eagle3Head, parse_layers
from specharness.methods.eagle.checkpoint import load_head
from specharness.methods.sam import drafter as sam
from specharness.methods.vanilla import NoDraft
from specharness.model import TargetModel
from specharness.options import resolve_options
from specharness.verify import greedy
from test_eagle import assert_tree_sampling_lossless
from test_medusa import write_selfdistill_data


def options(**kw):
    return resolve_options("eagle3", e3.OPTIONS, {"head": "untrained", "draft_vocab": "0", **{k: str(v) for k, v in kw.items()}})


@pytest.fixture(scope="module")
def tiny():
    return TargetModel.tiny("llama", vocab_size=10, n_layers=4, hidden_size=32, seed=5)


def shaken(head: Eagle3Head, seed: int = 0) -> Eagle3Head:
    """The untrained head with every parameter perturbed: its layers and fusion all matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.3)
    return head


def test_default_layers_scale_the_authors_choice_and_bad_layers_are_one_line_errors():
    assert parse_layers("", 30) == (2, 15, 27) and parse_layers("", 4) == (1, 2, 3)
    assert parse_layers("27,2,15", 30) == (2, 15, 27)
    for bad in ("2,15", "2,2,15", "0,1,2", "2,15,31", "a,b,c"):
        with pytest.raises(UsageError, match="layers") as err:
            parse_layers(bad, 30)
        assert "\n" not in str(err.value)


def test_the_training_time_test_computes_what_drafting_does(tiny):
    """Step j of ``unroll`` at row t equals the head run as a chain over the committed prefix (the
    target's features) and then its own outputs, one position at a time: the attention pattern a
    depth-(j+1) draft meets. Built independently: ``run_head`` over a growing chain."""
    torch.manual_seed(0)
    head = shaken(Eagle3Head.for_target(tiny).float())
    ids = torch.randint(0, tiny.vocab_size, (9,))
    feat = torch.randn(8, tiny.hidden_size)
    with torch.no_grad():
        outs = e3t.unroll(head, tiny, ids, feat, 3)
        for t in (0, 3, 7):
            feats, toks = [feat[i] for i in range(t + 1)], [ids[i + 1] for i in range(t + 1)]
            for j in range(3):
                if j:
                    feats.append(ref)  # noqa: F821 (the last step's output)
                    toks.append(ids[min(t + 1 + j, len(ids) - 1)])
                ref = run_head(head, tiny, torch.stack(toks), torch.stack(feats))[-1]
                assert torch.allclose(outs[j][t], ref, atol=1e-5), (t, j)


def test_greedy_identical_to_vanilla(smol, vanilla_greedy, first_questions):
    prompt = smol.chat_ids([{"role": "user", "content": first_questions[1].turns[0]}])
    d = e3.build(smol, options())
    assert d.capture_layers == (1, 14, 26)  # outputs of the layers before 2, 15, 27
    g = generate(smol, d, greedy, prompt, 24)
    assert g.token_ids == vanilla_greedy(prompt, 24)


def test_the_head_reads_the_captured_layers_not_the_final_state(tiny):
    """Feeding the fused feature from the wrong states changes the drafts: the prefill and every
    verification hand over the layers the head names."""
    torch.set_num_threads(1)
    d = e3.build(tiny, options(depth=2, top_k=2, total_tokens=3))
    shaken(d.head)
    fed = []
    source = d.head.feature_source
    d.head.feature_source = lambda hidden, captured: (fed.append(sorted(captured)), source(hidden, captured))[1]
    try:
        g = generate(tiny, d, greedy, [1, 2, 3, 4], 10)
    finally:
        del d.head.feature_source
    assert g.token_ids == generate(tiny, NoDraft(), greedy, [1, 2, 3, 4], 10).token_ids
    assert fed and all(c == [0, 1, 2] for c in fed), fed  # prefill + each round: entering layers 1, 2, 3


def test_sampling_keeps_the_target_distribution(tiny):
    assert_tree_sampling_lossless(tiny, e3.build(tiny, options(depth=2, top_k=3, total_tokens=5)))


def test_a_missing_head_says_how_to_train_and_an_eagle_head_is_refused(tiny, tmp_path):
    with pytest.raises(UsageError, match="train eagle3") as err:
        e3.build(tiny, resolve_options("eagle3", e3.OPTIONS, {}))
    assert "\n" not in str(err.value)
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "config.json").write_text(json.dumps({"method": "eagle", "model": tiny.name,
                                                            "hidden": tiny.hidden_size}))
    (tmp_path / "h" / "model.safetensors").write_bytes(b"")
    with pytest.raises(UsageError, match="holds a eagle head, not a eagle3 one"):
        e3.build(tiny, options(head=str(tmp_path / "h")))


def test_trainer_learns_saves_and_loads(tiny, tmp_path):
    data = tmp_path / "data"
    opts = resolve_options("eagle3", e3t.OPTIONS, {"conversations": "24", "max_answer_tokens": "16", "epochs": "4",
                                                   "seqs_per_step": "4", "topk": "4", "draft_vocab": "8",
                                                   "held_out": "0.25", "data": str(data), "lr": "0.01",
                                                   "steps": "2"})
    write_selfdistill_data(tiny, data, sd.recipe(opts), n_rows=24, answer=16)
    report = e3t.run(tiny, opts, tmp_path / "head", False)
    ho, before = report["held_out"], report["untrained_held_out"]
    assert ho["positions"] > 0 and report["layers"] == [1, 2, 3]
    assert ho["top1_depth1"] > before["top1_depth1"] and ho["top1_depth2"] > before["top1_depth2"]
    assert 0 <= ho["top1_own_prefix"] <= 1 and "top1_depth3" in ho
    assert (data / "features-l1-2-3-k4.safetensors").is_file()  # the teacher's layers, cached beside the data
    head, rows = load_head(tmp_path / "head", tiny, kind=e3.KIND)
    assert isinstance(head, Eagle3Head) and head.layers == (1, 2, 3) and rows.numel() == 8
    from safetensors.torch import load_file
    assert load_file(str(tmp_path / "head" / "model.safetensors"))["fuse.weight"].dtype == torch.bfloat16  # -o dtype
    assert head.fuse.weight.dtype == tiny.dtype  # loaded in the target's
    info = e3.head_info(tiny, resolve_options("eagle3", e3.OPTIONS, {"head": str(tmp_path / "head")}))
    assert info["layers"] == [1, 2, 3] and info["training"]["train_conversations"] == 18
    d = e3.build(tiny, resolve_options("eagle3", e3.OPTIONS, {"head": str(tmp_path / "head")}))
    ref = generate(tiny, NoDraft(), greedy, [1, 2, 3], 16).token_ids
    assert generate(tiny, d, greedy, [1, 2, 3], 16).token_ids == ref
    # the same measure serves EAGLE's head (the final state, normed by the target): one comparison
    from specharness.methods.eagle.head import EagleHead
    feats = e3t.held_out_features(tiny, sd.load(data)[0], [0, 1], (tiny.n_layers,), 4)
    ev = e3t.evaluate(EagleHead.for_target(tiny).float(), tiny, Conversations(sd.load(data)[0].select([0, 1]), feats,
                                                                              tiny, None, normed=False), [0, 1], None, None)
    assert ev["positions"] > 0 and 0 <= ev["top1_depth2"] <= 1
    assert all(ev[f"top4_depth{j}"] >= ev[f"top1_depth{j}"] for j in (1, 2, 3))  # a top 4 holds the top 1


def test_agreement_counts_the_label_at_the_top_and_among_the_top_k():
    """Row 0: the label is the head's best; row 1: its second (a top-2 hit, a top-1 miss); row 2: its
    worst. Draft rows map score columns to token ids."""
    from specharness.methods.eagle3.train import agree
    scores = torch.tensor([[3.0, 1.0, 0.0], [1.0, 3.0, 2.0], [0.0, 1.0, 2.0]])
    rows = torch.tensor([10, 20, 30])  # column i is token rows[i]
    first, among = agree(scores, rows, torch.tensor([10, 30, 10]), 2)
    assert first.tolist() == [True, False, False] and among.tolist() == [True, True, False]
    first, among = agree(scores, None, torch.tensor([0, 2, 0]), 2)  # no draft rows: columns are token ids
    assert first.tolist() == [True, False, False] and among.tolist() == [True, True, False]


def test_sam_falls_back_to_eagle3(smol, vanilla_greedy, first_questions):
    opts = resolve_options("sam", sam.OPTIONS, {"fallback": "eagle3", "fallback_options": "head=untrained+draft_vocab=0"})
    d = sam.build(smol, opts)
    assert d.capture_layers == (1, 14, 26)
    prompt = smol.chat_ids([{"role": "user", "content": first_questions[0].turns[0]}])
    assert generate(smol, d, greedy, prompt, 24).token_ids == vanilla_greedy(prompt, 24)
    assert sam.info(smol, opts)["eagle3"]["layers"] == [2, 15, 27]
