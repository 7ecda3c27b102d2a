"""SAM-Decoding: the suffix automaton against brute force, the drafter's retrieval, greedy identity
with vanilla for every fallback, lossless sampling, and bad options as one-line errors."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch

from specharness.api import DecodeState, Proposal
from specharness.engine import generate
from specharness.errors import UsageError
from specharness.methods.recycling import TokenRecycling
from specharness.methods.sam.automaton import Matcher, SuffixAutomaton
from specharness.methods.sam.drafter import SamDrafter
from specharness.metrics import by_source
from specharness.model import TargetModel
from specharness.plugins import build_registry
from specharness.records import Generation, QuestionResult
from specharness.report import tables
from specharness.report.runs import select_runs
from specharness.results import FORMAT, meta_path, question_record
from specharness.runner import build_method
from specharness.verify import greedy


def brute_earlier(text: list[int]) -> tuple[int, int]:
    """The longest suffix of ``text`` that also ends before its last token, and the latest such end."""
    i, best = len(text) - 1, (0, -1)
    for n in range(1, i + 1):
        suffix = text[i + 1 - n:]
        ends = [e for e in range(n - 1, i) if text[e + 1 - n:e + 1] == suffix]
        if not ends:
            break  # a longer suffix cannot occur where a shorter one does not
        best = (n, ends[-1])
    return best


@pytest.mark.parametrize("alphabet, seed", [(2, 0), (3, 1), (5, 2), (40, 3)])
def test_the_longest_earlier_match_and_its_latest_occurrence(alphabet, seed):
    """After every token: the longest suffix that occurred before, from its most recent occurrence
    (clones made by later splits included), checked against brute force."""
    rng = random.Random(seed)
    text = [rng.randrange(alphabet) for _ in range(300)]
    a = SuffixAutomaton()
    for i, tok in enumerate(text):
        a.extend(tok)
        assert tuple(a.earlier()) == brute_earlier(text[:i + 1]), i
    assert len(a.length) <= 2 * len(text)  # a suffix automaton has at most 2n - 1 states


def test_the_matcher_against_another_text():
    corpus = [5, 1, 2, 3, 4, 9, 1, 2, 7]
    m = Matcher(SuffixAutomaton(corpus))
    for tok, length, end in [(1, 1, 6), (2, 2, 7), (3, 3, 3), (8, 0, -1), (2, 1, 7)]:
        m.step(tok)
        assert tuple(m.match) == (length, end)


def _proposal(ids: list[int], **kw) -> Proposal:
    d = SamDrafter(**kw)
    state = DecodeState(None, None, list(ids), len(ids), 64, 0.0, torch.Generator())
    d.begin(state, None)
    return d.propose(state)


def test_the_most_recent_occurrence_is_drafted():
    """As pld does: 'a b' was followed by x, then by y; after 'a b' again, y is drafted, also when
    the state holding 'a b' was split on the way (the reviewer's case: c a b x c a b y d a b)."""
    a, b, c, d, x, y = 1, 2, 3, 4, 5, 6
    assert _proposal([a, b, x, a, b, y, c, a, b], k=3, min_match=2).tokens == [y, c, a]
    assert _proposal([c, a, b, x, c, a, b, y, d, a, b], k=3, min_match=2).tokens == [y, d, a]


def test_a_repetition_continues_with_its_own_drafts():
    assert _proposal([9, 1, 2, 3, 1, 2, 3, 1, 2], k=7, min_match=2).tokens == [3, 1, 2, 3, 1, 2, 3]


def test_a_corpus_match_drafts_when_it_is_longer_and_long_enough():
    corpus = SuffixAutomaton([7, 7, 1, 2, 3, 4, 5, 6])
    p = _proposal([9, 2, 8, 1, 2, 3], k=3, min_match=2, corpus=corpus, corpus_min_match=3)
    assert (p.tokens, p.source) == ([4, 5, 6], "corpus")
    p = _proposal([9, 2, 8, 1, 2, 3], k=3, min_match=2, corpus=corpus, corpus_min_match=4,
                  short_matches=False)  # 3 tokens: too short
    assert (p.tokens, p.source) == ([], "")
    p = _proposal([4, 5, 9, 4, 5], k=2, min_match=2, corpus=corpus, corpus_min_match=2)  # a tie: the text's own
    assert (p.tokens, p.source) == ([9, 4], "text")
    # the corpus's longer match ends the corpus (nothing follows it): the text's own match drafts
    p = _proposal([9, 1, 2, 3, 7, 0, 1, 2, 3], k=3, min_match=2, corpus=SuffixAutomaton([0, 1, 2, 3]),
                  corpus_min_match=2)
    assert (p.tokens, p.source) == ([7, 0, 1], "text")


class Fixed:
    """A fallback that always proposes ``tokens`` (none: recycling before the token's row is filled)."""
    exit_layer, max_width = 0, 1

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def begin(self, state, h):
        pass

    def propose(self, state):
        return Proposal(list(self.tokens))


def test_a_short_corpus_match_gives_way_to_the_fallback_then_to_the_texts_own():
    """A 3-token match in a large corpus keeps less than the fallback's draft or a 1-token match in
    the text itself: below corpus_min_match (default 5) it drafts only when neither has anything."""
    corpus = SuffixAutomaton([7, 7, 1, 2, 3, 4, 5, 6])
    ids = [9, 3, 8, 1, 2, 3]  # the corpus matches '1 2 3'; the text its own '3' once, followed by 8 1 2
    assert _proposal(ids, k=3, min_match=2, corpus=corpus, fallback=Fixed([42])).source == "fallback"
    p = _proposal(ids, k=3, min_match=2, corpus=corpus, fallback=Fixed([]))
    assert (p.tokens, p.source) == ([8, 1, 2], "text, short")
    p = _proposal([9, 8, 1, 2, 3], k=3, min_match=2, corpus=corpus, fallback=Fixed([]))  # the text has no match
    assert (p.tokens, p.source) == ([4, 5, 6], "corpus, short")


def test_a_short_match_drafts_when_the_fallback_has_nothing():
    class Empty:  # a fallback with nothing to say (recycling before the token's row is filled)
        exit_layer, max_width = 0, 1

        def begin(self, state, h):
            pass

        def propose(self, state):
            return Proposal()

    ids = [1, 2, 3, 4, 5, 9, 3]  # '3' matched once, followed by 4 5 9: a 1-token match
    p = _proposal(ids, k=3, min_match=2, fallback=Empty())
    assert (p.tokens, p.source) == ([4, 5, 9], "text, short")
    assert _proposal(ids, k=3, min_match=2, fallback=Empty(), short_matches=False).tokens == []
    assert _proposal(ids, k=3, min_match=2).source == "text, short"  # no fallback at all


@pytest.fixture(scope="module")
def registry():
    return build_registry()


def _drafter(registry, target, opts):
    method = build_method(registry, "sam", [o for o in opts.split(":") if o], target, 0.0)
    return registry.drafters["sam"].build(target, method.options)


@pytest.mark.parametrize("opts", ["", "fallback=none:min_match=1", "fallback=eagle:min_match=3"])
def test_greedy_identical_to_vanilla_on_every_subtask(smol, vanilla_greedy, identity_questions, registry, opts):
    """Every round says who proposed it (kept in the results): retrieval and, with one, the fallback."""
    sources, d = Counter(), _drafter(registry, smol, opts)
    for q in identity_questions:
        prompt = smol.chat_ids([{"role": "user", "content": q.turns[0]}])
        g = generate(smol, d, greedy, prompt, 40)
        assert g.token_ids == vanilla_greedy(prompt, 40), f"sam {opts} differs from vanilla on {q.subtask}"
        sources.update(r.source for r in g.rounds[1:])
        assert all(bool(r.source) == (r.drafted > 0) for r in g.rounds[1:])
    assert sources["text"] > 0  # retrieval drafted somewhere
    assert (sources["fallback"] > 0) == ("fallback=none" not in opts)  # and so did the fallback, if any
    assert set(sources) <= {"text", "text, short", "fallback", ""}


def test_greedy_identical_to_vanilla_with_a_corpus(smol, vanilla_greedy, identity_questions, registry, tmp_path):
    """The corpus path (its own automaton, continuations that end with the corpus) keeps greedy
    output identical too; a low bar makes it draft."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The capital of France is Paris. Here is a short answer to your question, step by step.\n"
                      "In summary, the main points are the following. I hope this helps! Let me know if you need more.\n")
    sources, d = Counter(), _drafter(registry, smol, f"corpus={corpus}:corpus_min_match=2")
    for q in identity_questions:
        prompt = smol.chat_ids([{"role": "user", "content": q.turns[0]}])
        g = generate(smol, d, greedy, prompt, 40)
        assert g.token_ids == vanilla_greedy(prompt, 40), f"sam with a corpus differs from vanilla on {q.subtask}"
        sources.update(r.source for r in g.rounds[1:])
    assert sources["corpus"] + sources["corpus, short"] > 0  # the corpus drafted somewhere


@pytest.mark.parametrize("opts, needle", [
    ("fallback=medusa", "one of none, recycling, eagle"), ("min_match=0", "outside"), ("k=0", "outside"),
    ("fallback_options=depth", "is not KEY=VALUE"), ("fallback=none:fallback_options=top_k=2", "drop one"),
    ("fallback=eagle:fallback_options=depth=0+top_k=2", "outside"),
    ("fallback_options=nodes=0", "outside"), ("fallback_options=depth=2", "has no option 'depth'"),
    ("corpus=/no/such/file.txt", "no such file"), ("corpus_min_match=0", "outside"),
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


def test_result_files_keep_who_proposed_each_round(tmp_path):
    """A round's proposer goes through the result file to the report's sources table."""
    torch.set_num_threads(1)
    tiny = TargetModel.tiny("llama", vocab_size=12, n_layers=2, hidden_size=32, seed=3)
    d = SamDrafter(k=4, min_match=2, fallback=TokenRecycling(tiny, 4, 7, False))
    g = generate(tiny, d, greedy, [1, 2, 3, 4, 1, 2, 3, 4, 5, 1, 2], 32)
    res = QuestionResult("q1", "qa", "qa", "sam", turns=["x"], generations=[Generation(g.token_ids, g.rounds, 1.0,
                                                                                       g.stop)], truncated=[False],
                         wall_time_repeats=[[1.0]])
    meta = {"method": "sam", "model": "tiny", "options": {}}
    path = tmp_path / "sam.jsonl"
    path.write_text(json.dumps(question_record(res, meta)) + "\n")
    meta_path(path).write_text(json.dumps({**meta, "format": FORMAT, "dtype": "float32", "device": "cpu",
                                           "max_new_tokens": 32, "temperature": 0.0}))
    run, = select_runs([path])
    parts = by_source(run.records)
    assert set(parts) <= {"text", "text, short", "fallback", ""} and parts["text"]["rounds"] > 0
    assert sum(p["rounds"] for p in parts.values()) == len(g.rounds) - 1
    assert sum(p["drafted"] * p["rounds"] for p in parts.values()) == sum(r.drafted for r in g.rounds)
    table, = tables.sources([run])
    assert {row[1] for row in table.rows} >= {"text"}
