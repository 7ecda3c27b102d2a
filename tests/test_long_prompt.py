"""Issue 33: a prompt far past the model's context (20,000 words) is left-truncated to at most
``MAX_PROMPT_TOKENS`` with one warning line before it is generated, keeps the chat template whole,
and its result records the cut. Before the fix it was cut to the whole context (8,184 tokens of
SmolLM2) with no warning, and the prefill ran past 300 s in float32 eager."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from specharness.cli import main
from specharness.runner import MAX_PROMPT_TOKENS, prompt_ids, recorded_turns

WORDS = "the quick brown fox jumps over a lazy dog while seven clever cats watch from the garden wall".split()
OBSERVER = ("import sys\nfrom specharness.hookspecs import hookimpl\n"
            "@hookimpl\n"
            "def specharness_round(record, context):\n"
            "    print(f'round of question {context.question_id}', file=sys.stderr)\n")


def long_text(n_words: int = 20_000, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + " Summarize the text above."


@pytest.fixture(scope="module")
def long_context_dir(smol, tmp_path_factory) -> Path:
    """A tiny random llama with SmolLM2's tokenizer and its context (8192 positions): the full
    context is reachable, yet a forward costs milliseconds."""
    from specharness.model import TargetModel
    d = tmp_path_factory.mktemp("tiny-long-context")
    tiny = TargetModel.tiny("llama", vocab_size=smol.vocab_size, n_layers=2, hidden_size=32, seed=5)
    tiny.hf.config.max_position_embeddings = smol.max_context
    tiny.hf.save_pretrained(d)
    smol.tokenizer.save_pretrained(d)
    return d


def test_an_overlong_prompt_is_cut_with_one_warning_before_its_prefill(long_context_dir, tmp_path, capsys):
    bench = tmp_path / "question.jsonl"
    bench.write_text("".join(json.dumps(q) + "\n" for q in [
        {"question_id": 7001, "category": "summarization", "turns": [long_text()]},
        {"question_id": 7002, "category": "summarization", "turns": ["Summarize: the cat sat on the mat."]},
        {"question_id": 7003, "category": "writing", "turns": ["Name a colour.", "And another one?"]}]))
    observer = tmp_path / "observer.py"
    observer.write_text(OBSERVER)
    out = tmp_path / "long.jsonl"
    capsys.readouterr()
    started = time.perf_counter()
    assert main(["run", "--model", str(long_context_dir), "--bench-file", str(bench), "--max-new-tokens", "8",
                 "--repeats", "2", "--warmup", "0", "--threads", "1", "--plugin", str(observer),
                 "--out", str(out)]) == 0
    assert time.perf_counter() - started < 600  # a guard against the old hang only: the prefill width below is the check
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    warned = [i for i, line in enumerate(err) if line.startswith("warning: question 7001")]
    assert len(warned) == 1, err  # once, not once per repeat
    line = err[warned[0]]
    assert f"left-truncated to {MAX_PROMPT_TOKENS}" in line and " cut;" in line, line
    first_round = next(i for i, line in enumerate(err) if "round of question 7001" in line)
    assert warned[0] < first_round  # said before the question is generated
    assert not any(line.startswith("warning: question 7002") for line in err)
    records = {r["question_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records[7001]["truncated"] == [True] and records[7002]["truncated"] == [False]
    prefill_width = records[7001]["choices"][0]["rounds"][0]["width"][0]
    assert prefill_width <= MAX_PROMPT_TOKENS  # the work a prefill does is bounded, whatever the prompt
    # a record's turns rebuilt for replay are the prompts the run prefilled, cut and multi-turn alike
    from specharness.model import TargetModel
    from specharness.tasks.specbench import load_questions
    model, questions = TargetModel.load(str(long_context_dir)), {q.question_id: q for q in load_questions(bench)}
    for qid in (7001, 7003):
        turns = recorded_turns(model, records[qid], questions[qid], 8)
        assert [len(p) for p, _ in turns] == [r["width"][0] for r in records[qid]["choices"][0]["rounds"]]
        assert [a for _, a in turns] == records[qid]["choices"][0]["token_ids"]
    assert len(turns) == 2


def test_truncation_keeps_the_chat_template_and_the_latest_text(long_context_dir):
    from specharness.model import TargetModel
    target = TargetModel.load(str(long_context_dir))
    tok = target.tokenizer
    short = [{"role": "user", "content": "What is two plus two?"}]
    assert prompt_ids(target, short, 8) == (target.chat_ids(short), 0)  # a prompt that fits is untouched
    messages = [{"role": "user", "content": long_text(seed=1)}, {"role": "assistant", "content": "It is long."},
                {"role": "user", "content": "Now say it again, briefly: the end."}]
    full = target.chat_ids(messages)
    started = time.perf_counter()
    ids, cut = prompt_ids(target, messages, 8)
    assert time.perf_counter() - started < 120  # tokenising, never a forward (a loose guard: shared cores)
    assert len(ids) <= MAX_PROMPT_TOKENS and cut == len(full) - len(ids) > 0
    text, whole = tok.decode(ids), tok.decode(full)
    head = whole[:whole.index("<|im_start|>user\n") + len("<|im_start|>user\n")]
    assert text.startswith(head)  # the system prompt and the first role marker survive
    assert text.count("<|im_start|>") == whole.count("<|im_start|>")  # every turn still delimited
    assert text.endswith(whole[whole.index("<|im_end|>\n<|im_start|>assistant\nIt is long."):])  # latest text whole
