"""SAM-Decoding: the suffix automaton against brute force, the drafter's retrieval, greedy identity
with vanilla for every fallback, lossless sampling, and bad options as one-line errors."""

from __future__ import annotations

import random

import pytest
import torch

from specharness.api import DecodeState
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.methods.sam.automaton import Matcher, SuffixAutomaton
from specharness.methods.sam.drafter import SamDrafter
from specharness.plugins import build_registry
from specharness.runner import build_method
from specharness.verify import greedy


def longest_earlier_suffix(text: list[int], i: int) -> int:
    """Brute force: the longest suffix of text[:i + 1] that also ends at some position < i."""
    best = 0
    for n in range(1, i + 1):
        suffix = text[i + 1 - n:i + 1]
        if any(text[e + 1 - n:e + 1] == suffix for e in range(n - 1, i)):
            best = n
        else:
            break  # a longer suffix cannot occur where a shorter one does not
    return best


@pytest.mark.parametrize("alphabet, seed", [(2, 0), (3, 1), (5, 2), (40, 3)])
def test_the_matcher_finds_the_longest_earlier_occurrence(alphabet, seed):
    """Fed each token before the automaton is extended with it, the matcher holds the longest
    suffix that occurred before, and its position is an occurrence of it with a continuation."""
    rng = random.Random(seed)
    text = [rng.randrange(alphabet) for _ in range(300)]
    a = SuffixAutomaton()
    m = Matcher(a)
    for i, tok in enumerate(text):
        if i:
            m.remember(i - 1)
        m.step(tok)
        a.extend(tok)
        m.settle()
        assert m.length == longest_earlier_suffix(text, i), i
        if m.length:
            p = m.position
            assert p < i and text[p + 1 - m.length:p + 1] == text[i + 1 - m.length:i + 1], i
    assert len(a.length) <= 2 * len(text)  # a suffix automaton has at most 2n - 1 states


def test_the_matcher_against_another_text():
    corpus = [5, 1, 2, 3, 4, 9, 1, 2, 7]
    m = Matcher(SuffixAutomaton(corpus))
    for tok, length, follows in [(1, 1, [2, 3]), (2, 2, [3, 4]), (3, 3, [4, 9]), (8, 0, []), (2, 1, [3, 4])]:
        m.step(tok)
        assert (m.length, m.continuation(2)) == (length, follows)


def test_the_most_recent_occurrence_is_drafted():
    """As pld does: 'a b' was followed by X, then by Y; after 'a b' again, Y is drafted."""
    a, b, x, y, z = 1, 2, 3, 4, 5
    d = SamDrafter(k=3, min_match=2)
    state = DecodeState(None, None, [a, b, x, a, b, y, z, a, b], 9, 32, 0.0, torch.Generator())
    d.begin(state, None)
    assert d.propose(state).tokens == [y, z, a]


def test_a_repetition_continues_with_its_own_drafts():
    d = SamDrafter(k=7, min_match=2)
    state = DecodeState(None, None, [9, 1, 2, 3, 1, 2, 3, 1, 2], 9, 64, 0.0, torch.Generator())
    d.begin(state, None)
    assert d.propose(state).tokens == [3, 1, 2, 3, 1, 2, 3]


def test_a_corpus_match_drafts_when_it_is_longer():
    corpus = SuffixAutomaton([7, 7, 1, 2, 3, 4, 5, 6])
    d = SamDrafter(k=3, min_match=2, corpus=corpus)
    state = DecodeState(None, None, [9, 2, 8, 1, 2, 3], 6, 64, 0.0, torch.Generator())
    d.begin(state, None)
    assert d.propose(state).tokens == [4, 5, 6] and d.stats["corpus"] == 1
    short = SamDrafter(k=3, min_match=4, corpus=corpus)  # a 3-token match is below min_match: nobody drafts
    short.begin(state, None)
    assert short.propose(state).tokens == [] and short.stats["none"] == 1


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _drafter(registry, target, opts):
    method = build_method(registry, "sam", [o for o in opts.split(":") if o], target, 0.0)
    return registry.drafters["sam"].build(target, method.options)


@pytest.mark.parametrize("opts", ["", "fallback=none:min_match=1", "fallback=eagle:min_match=3"])
def test_greedy_identical_to_vanilla_on_every_subtask(smol, vanilla_greedy, first_questions, registry, opts):
    stats = {}
    for q in first_questions:
        prompt = smol.chat_ids([{"role": "user", "content": q.turns[0]}])
        d = _drafter(registry, smol, opts)
        g = generate(smol, d, greedy, prompt, 40)
        assert g.token_ids == vanilla_greedy(prompt, 40), f"sam {opts} differs from vanilla on {q.subtask}"
        for key, n in d.stats.items():
            stats[key] = stats.get(key, 0) + n
    assert stats.get("text", 0) > 0  # retrieval drafted somewhere
    if "fallback=none" not in opts:
        assert stats.get("fallback", 0) > 0  # and so did the fallback


@pytest.mark.parametrize("opts, needle", [
    ("fallback=medusa", "one of none, recycling, eagle"), ("min_match=0", "outside"), ("k=0", "outside"),
    ("fallback_options=depth", "is not KEY=VALUE"), ("fallback=none:fallback_options=top_k=2", "drop one"),
    ("fallback_options=nodes=0", "outside"), ("fallback_options=depth=2", "has no option 'depth'"),
    ("corpus=/no/such/file.txt", "no such file"),
])
def test_bad_options_are_one_line_errors(smol, registry, opts, needle):
    with pytest.raises(UsageError) as err:
        _drafter(registry, smol, opts)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_corpus_that_quotes_the_benchmark_is_refused(smol, registry, tmp_path):
    from specharness.tasks.specbench import SAMPLE_FILE, load_questions
    question = load_questions(SAMPLE_FILE)[0]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Some notes.\n" + question.turns[0] + "\nMore notes.\n", encoding="utf-8")
    with pytest.raises(UsageError, match="quotes Spec-Bench's question"):
        _drafter(registry, smol, f"corpus={corpus}")
    corpus.write_text("The quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    d = _drafter(registry, smol, f"corpus={corpus}")
    assert len(d.corpus) > 100
