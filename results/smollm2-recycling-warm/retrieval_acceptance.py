"""How many tokens a retrieval draft keeps, by the length of the match it came from: the text's own
(prompt + answer so far, as pld and sam search it) against a static corpus, drafted at every position
of vanilla's greedy answers, 7 tokens long. Exact for greedy decoding, where the answer is the target's
whichever drafter ran: no model forward, only the tokenizer and chat template.
Usage: python retrieval_acceptance.py VANILLA.jsonl QUESTIONS.jsonl CORPUS.txt"""
import collections
import json
import sys

from specharness.methods.sam.automaton import Matcher, SuffixAutomaton
from specharness.methods.sam.drafter import continuation, load_corpus
from specharness.model.target import TargetModel
from specharness.runner import prompt_ids
from specharness.tasks.specbench import load_questions

K = 7
runs, qfile, corpus_file = sys.argv[1], sys.argv[2], sys.argv[3]
target = TargetModel.load("smollm2")
corpus = load_corpus(target, corpus_file)
questions = {q.question_id: q for q in load_questions(qfile)}
seen = collections.defaultdict(lambda: [0, 0])  # (source, match length capped at 8) -> [positions, tokens kept]


def kept(drafts: list[int], truth: list[int]) -> int:
    n = 0
    while n < min(len(drafts), len(truth)) and drafts[n] == truth[n]:
        n += 1
    return n


for line in open(runs):
    rec = json.loads(line)
    q, messages = questions[rec["question_id"]], []
    for turn, answer in enumerate(rec["choices"][0]["token_ids"]):
        messages.append({"role": "user", "content": q.turns[turn]})
        ids = prompt_ids(target, messages, 128)[0]
        own, other = SuffixAutomaton(ids), Matcher(corpus)
        for tok in ids:
            other.step(tok)
        for i in range(len(answer) - 1):
            truth = answer[i:i + K]
            for source, (length, end), text in (("text", own.earlier(), own.text),
                                                 ("corpus", other.match, corpus.text)):
                if length:
                    s = seen[(source, min(length, 8))]
                    s[0] += 1
                    s[1] += kept(continuation(text, end, K, own=source == "text"), truth)
            own.extend(answer[i])
            other.step(answer[i])
        messages.append({"role": "assistant", "content": rec["choices"][0]["turns"][turn]})
print("source   match  positions  tokens kept per draft  (match 8 = 8 or more tokens)")
for (source, length), (n, k) in sorted(seen.items()):
    print(f"{source:7s} {length:6d} {n:10d} {k / n:22.2f}")
