"""Tokens a round keeps for pld's drafting rules, replayed on vanilla's greedy answers with the shipped
drafter (``methods/pld.py``): exact for greedy decoding, where the answer is the target's whichever drafter
ran, so no model forward runs (only the tokenizer and chat template). Each turn is decoded as the engine
would: propose from prompt + answer so far, keep the longest drafted path the answer follows, then the
target's own token. Prints tokens per round (CR) overall and per subtask, and the share of rounds whose
draft was a tree.
Usage: python acceptance.py VANILLA.jsonl QUESTIONS.jsonl OPTIONS... (each OPTIONS: pld options, k=v:k=v)"""
import collections
import json
import sys
from types import SimpleNamespace

from specharness.methods.pld import OPTIONS, build
from specharness.model.target import TargetModel
from specharness.options import resolve_options
from specharness.runner import recorded_turns
from specharness.tasks.specbench import load_questions
from specharness.tree import Tree


def kept(prop, truth: list[int]) -> int:
    """Drafts on the longest path of ``prop`` that ``truth`` follows."""
    children = Tree.from_drafts(prop.parents, len(prop.tokens)).children
    node, n = 0, 0
    while n < len(truth):
        node = next((c for c in children[node] if prop.tokens[c - 1] == truth[n]), None)
        if node is None:
            break
        n += 1
    return n


runs, qfile, variants = sys.argv[1], sys.argv[2], sys.argv[3:]
max_new = json.load(open(runs.removesuffix(".jsonl") + ".meta.json"))["max_new_tokens"]  # as the run cut prompts
target = TargetModel.load("smollm2")
questions = {q.question_id: q for q in load_questions(qfile)}
turns = [(rec["subtask"], prompt, answer) for rec in map(json.loads, open(runs))
         for prompt, answer in recorded_turns(target, rec, questions[rec["question_id"]], max_new)]
print(f"{len(turns)} turns of {runs}")
print("options | CR | tree rounds | " + " | ".join(sorted({t[0] for t in turns})))
for variant in variants:
    options = resolve_options("pld", OPTIONS, [o for o in variant.split(":") if o])
    drafter = build(target, options)
    tally = collections.defaultdict(lambda: [0, 0])  # subtask -> tokens, rounds
    trees = 0
    for subtask, prompt, answer in turns:
        ids = list(prompt) + answer[:1]  # the prefill chose the first token
        state = SimpleNamespace(ids=ids, prompt_len=len(prompt), max_new_tokens=max_new, max_draft=0)
        drafter.begin(state, None)
        done = 1
        while done < len(answer):
            state.max_draft = max_new - done - 1  # as DecodeState.max_draft: room left after the target's token
            prop = drafter.propose(state)
            trees += prop.parents is not None
            step = min(kept(prop, answer[done:]) + 1, len(answer) - done)
            ids += answer[done:done + step]
            done += step
            drafter.commit(state, None)
            tally[subtask][0] += step
            tally[subtask][1] += 1
    rounds = sum(r for _, r in tally.values())
    cr = sum(t for t, _ in tally.values()) / rounds
    print(f"{variant or '(defaults)'} | {cr:.3f} | {trees / rounds:.0%} | "
          + " | ".join(f"{t / r:.2f}" for _, (t, r) in sorted(tally.items())))
