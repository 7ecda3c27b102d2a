"""Self-distillation data: Magpie-style self-generated conversations, stored generically."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from specharness import selfdistill as sd
from specharness.errors import UsageError

SETTINGS = sd.GenerationSettings(conversations=2, max_user_tokens=32, min_user_tokens=2, max_answer_tokens=6,
                                 batch_size=4, capture_layers=(2,), topk=4)


@pytest.fixture(scope="module")
def data(smol, tmp_path_factory):
    out = tmp_path_factory.mktemp("selfdistill")
    ds = sd.generate(smol, SETTINGS, out, progress=False)
    return smol, out, ds


def test_user_prefix_is_the_template_before_the_user_turn(smol):
    text = smol.tokenizer.decode(sd.user_prefix_ids(smol))
    full = smol.tokenizer.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False)
    assert full.startswith(text) and text.rstrip().endswith("user")


def test_dataset_layout_and_loss_mask(data):
    target, out, ds = data
    assert len(ds) == SETTINGS.conversations
    assert set(ds.column_names) >= {"input_ids", "prompt_len", "loss_mask", "user", "stop"}
    meta = json.loads((out / "generation.json").read_text())
    assert meta["settings"]["max_answer_tokens"] == 6 and meta["model"]["name"] == target.name
    assert meta["wall_time_s"]["total"] > 0 and meta["flops"]["total"] > 0
    assert meta["tokens"] == sum(len(r) for r in ds["input_ids"])
    assert not (out / "partial").exists()  # per-batch checkpoints are removed once done
    for row, (ids, mask) in zip(ds, sd.examples(ds)):
        P, n = row["prompt_len"], len(row["input_ids"])
        assert ids.tolist() == row["input_ids"]
        assert ids[:P].tolist() == target.chat_ids([{"role": "user", "content": row["user"]}])
        # mask[t] == 1 exactly when token t + 1 is an answer token
        assert mask.tolist() == [P - 1 <= t < n - 1 for t in range(n)]
        assert row["stop"] in ("eos", "length")
        assert 1 <= n - P <= 6


def test_never_benchmark_questions(data, sample_questions):
    questions = {t.strip() for q in sample_questions for t in q.turns}
    _, _, ds = data
    assert not questions & {u.strip() for u in ds["user"]}


def test_captured_features_match_teacher_forcing(data):
    target, out, ds = data
    got = sd.load_features(out)
    ref = sd.compute_features(target, ds, (2,), 4, progress=False)
    assert torch.equal(got["offsets"], ref["offsets"])
    o = got["offsets"].tolist()
    for i in range(len(ds)):
        a, b = o[i], o[i + 1]
        h, r = got["hidden.2"][a:b - 1], ref["hidden.2"][a:b - 1]  # the last token never ran
        assert torch.allclose(h, r, rtol=1e-3, atol=1e-3 * float(r.abs().max()))
        mask = got["topk_ids"][a:b, 0] >= 0
        assert torch.equal(mask, ref["topk_ids"][a:b, 0] >= 0)
        assert torch.allclose(got["topk_probs"][a:b], ref["topk_probs"][a:b], atol=1e-3)
        # greedy answers: every answer token is the target's argmax where it was chosen
        ids = torch.tensor(ds[i]["input_ids"])
        pos = mask.nonzero()[:, 0]
        assert torch.equal(got["topk_ids"][a:b][pos, 0].long(), ids[pos + 1])


def test_reuse_split_and_frequencies(data):
    target, out, ds = data
    again, meta, reused = sd.load_or_generate(target, SETTINGS, out, progress=False)
    assert reused and len(again) == len(ds)
    assert not sd.matches(meta, target, sd.GenerationSettings(conversations=3))
    tr, ho = sd.split(10, 0.2, seed=1)
    assert sorted(tr + ho) == list(range(10)) and len(ho) == 2 and sd.split(10, 0.2, seed=1) == (tr, ho)
    small, ho3 = sd.split(10, 0.2, seed=1, train_limit=3)
    mid, ho5 = sd.split(10, 0.2, seed=1, train_limit=5)
    assert ho3 == ho5 == ho and len(small) == 3 and set(small) < set(mid) < set(tr)  # nested, one held-out set
    with pytest.raises(UsageError, match="train_conversations=9 .* 8 training"):
        sd.split(10, 0.2, seed=1, train_limit=9)
    freq = sd.token_frequencies(ds, target.vocab_size)
    assert int(freq.sum()) == sum(len(r["input_ids"]) - r["prompt_len"] for r in ds)


@pytest.mark.parametrize("bad", [dict(conversations=0), dict(user_temperature=0.0), dict(max_answer_tokens=0),
                                 dict(capture_layers=(99,)), dict(min_user_tokens=0), dict(context=0.95)])
def test_bad_settings(smol, tmp_path, bad):
    with pytest.raises(UsageError) as e:
        sd.generate(smol, sd.GenerationSettings(**bad), tmp_path, progress=False)
    assert "\n" not in str(e.value)


def test_load_of_an_empty_directory(tmp_path):
    with pytest.raises(UsageError, match="no self-distillation dataset"):
        sd.load(tmp_path)


def test_context_share_names_its_data_only_when_used():
    plain = sd.GenerationSettings()
    assert "context" not in plain.text_key()  # data written before the option keeps its directory
    mixed = sd.GenerationSettings(conversations=10, context=0.25)
    assert mixed.text_key()["context"] == 0.25 and mixed.n_context == 2 and plain.n_context == 0


def test_context_turns_carry_an_answer_under_an_instruction(smol):
    tok = smol.tokenizer
    texts = ["The river floods every spring and the town moves uphill.", "Cats sleep.",
             "A kettle boils faster with a lid on, because less heat escapes as steam."]
    answers = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    users = ["Why do rivers flood?", "How do kettles work?"]
    long_enough = [t for t, a in zip(texts, answers) if len(a) >= 8]
    turns = sd.context_turns(tok, users, answers, 12, seed=3, min_tokens=8)
    assert len(turns) == 12 and turns == sd.context_turns(tok, users, answers, 12, seed=3, min_tokens=8)
    assert turns != sd.context_turns(tok, users, answers, 12, seed=4, min_tokens=8)
    for turn in turns:
        assert sum(t in turn for t in long_enough) == 1 and "Cats sleep." not in turn  # too short to be a passage
        instruction = next(i for i in sd.CONTEXT_INSTRUCTIONS
                           if i.split("{q}")[0] in turn)
        if "{q}" in instruction:
            assert any(instruction.format(q=u) in turn for u in users)
    with pytest.raises(UsageError, match="no answer of 99\\+ tokens"):
        sd.context_turns(tok, users, answers, 1, seed=0, min_tokens=99)


def test_a_context_recipe_answers_its_own_text(smol, tmp_path):
    s = sd.GenerationSettings(conversations=2, max_user_tokens=32, min_user_tokens=2, max_answer_tokens=6,
                              batch_size=4, context=0.5)
    ds = sd.generate(smol, s, tmp_path, progress=False)
    meta = json.loads((tmp_path / "generation.json").read_text())
    assert len(ds) == 2 and meta["context_conversations"] == 1 and meta["settings"]["context"] == 0.5
    first, second = ds[0], ds[1]
    passage = smol.tokenizer.decode(first["input_ids"][first["prompt_len"]:], skip_special_tokens=True).strip()
    assert passage and passage in second["user"]  # the passage is the first conversation's answer
    assert second["input_ids"][:second["prompt_len"]] == smol.chat_ids([{"role": "user", "content": second["user"]}])


def test_data_of_another_recipe_in_a_named_directory_is_refused_not_overwritten(data):
    target, out, ds = data
    before = (out / "generation.json").read_text()
    with pytest.raises(UsageError, match="another model, dtype or recipe") as e:
        sd.load_or_generate(target, sd.GenerationSettings(conversations=3), out, progress=False)
    assert "\n" not in str(e.value) and (out / "generation.json").read_text() == before


def test_each_dtype_has_its_own_shared_directory():
    from types import SimpleNamespace
    s = sd.GenerationSettings()
    fp32, bf16 = (SimpleNamespace(name="m", dtype=d) for d in (torch.float32, torch.bfloat16))
    assert sd.default_dir(fp32, s) != sd.default_dir(bf16, s)
    key = hashlib.sha1(json.dumps(s.text_key(), sort_keys=True).encode()).hexdigest()[:10]
    assert sd.default_dir(fp32, s).name == f"m-{key}"  # float32 data cached before keeps its directory


def test_bfloat16_text_has_the_bfloat16_directory_whichever_target_writes_it():
    from dataclasses import replace
    from types import SimpleNamespace
    s = sd.GenerationSettings()
    fp32, bf16 = (SimpleNamespace(name="m", dtype=d) for d in (torch.float32, torch.bfloat16))
    assert sd.default_dir(fp32, replace(s, dtype="bfloat16")) == sd.default_dir(bf16, s)
    assert sd.default_dir(bf16, replace(s, dtype="float32")) == sd.default_dir(fp32, s)
    assert replace(s, dtype="bfloat16").text_key() == s.text_key()  # the dtype is named by the model identity
    with pytest.raises(UsageError, match="dtype must be one of"):
        replace(s, dtype="float16").validate(30)


def test_a_float32_trainer_reads_text_written_in_bfloat16(smol, tmp_path):
    import copy
    from dataclasses import replace
    s = replace(SETTINGS, dtype="bfloat16")
    ds = sd.generate(smol, s, tmp_path, progress=False)
    meta = json.loads((tmp_path / "generation.json").read_text())
    assert meta["model"]["dtype"] == "bfloat16" and meta["settings"]["dtype"] == "bfloat16"
    assert next(smol.hf.parameters()).dtype == torch.float32  # the trainer's target is untouched
    # states of a bfloat16 forward are not captured: the float32 target computes them (teacher-forced)
    assert meta["settings"]["capture_layers"] == [] and not (tmp_path / "features.safetensors").exists()
    f = sd.layer_features(smol, ds, meta, tmp_path, (2,), 4)
    assert f["hidden.2"].dtype == torch.float32 and f["offsets"][-1] == meta["tokens"]
    # the answers are the bfloat16 model's greedy text
    writer = copy.deepcopy(smol.hf).to(torch.bfloat16)
    row = ds[0]
    P = row["prompt_len"]
    want = writer.generate(torch.tensor([row["input_ids"][:P]]), max_new_tokens=len(row["input_ids"]) - P,
                           do_sample=False, eos_token_id=sorted(sd._end_of_turn(smol)))
    assert want[0, P:].tolist() == row["input_ids"][P:]
    assert sd.load_or_generate(smol, s, tmp_path, progress=False)[2]  # reused by the same recipe
    assert not sd.matches(meta, smol, replace(s, dtype=""))  # float32 text is another data set
