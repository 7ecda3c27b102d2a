"""Kangaroo's last draft step of a round without the head rows (headless.patch: apply it first)
against with them (as before), in one process: the same drafter, its step forced to compute the head
in arm "head", the arms alternating answer by answer over the built-in sample questions, 3 passes,
greedy, 128 tokens. Prints each arm's mean draft and round ms per round and its tokens (identical).

    python results/smollm2-cpu-epyc-kangaroo-round/headless_ab.py > headless_ab.txt   (~4 min, warm store)
"""
import statistics

import torch

from specharness.engine import generate
from specharness.engine_ab import compiled_target
from specharness.methods.kangaroo import drafter as kangaroo
from specharness.model.engine_choice import cpu_name
from specharness.results import provenance
from specharness.tasks.specbench import load_questions
from specharness.verify import greedy

torch.set_num_threads(2)
t = compiled_target("default", widths=(2, 4), log=lambda line: None)
d = kangaroo.build(t, {})
step = d._step
arms = {"headless": lambda token, pos, head=True: step(token, pos, head),
        "head": lambda token, pos, head=True: step(token, pos, True)}
print("#", provenance(model=t.name, device="cpu", threads=torch.get_num_threads(), cpu=cpu_name(),
                      command="python results/smollm2-cpu-epyc-kangaroo-round/headless_ab.py"))
prompts = [t.chat_ids([{"role": "user", "content": q.turns[0]}]) for q in load_questions("tasks/sample_questions.jsonl")]
for name, f in arms.items():  # warm both graphs
    d._step = f
    generate(t, d, greedy, prompts[0], 32)
res = {n: {"draft": [], "round": [], "tokens": []} for n in arms}
for rep in range(3):
    for i, ids in enumerate(prompts):
        for name in (list(arms) if (rep + i) % 2 == 0 else list(arms)[::-1]):
            d._step = arms[name]
            g = generate(t, d, greedy, ids, 128)
            r = g.rounds[1:]
            res[name]["draft"] += [x.draft_s for x in r]
            res[name]["round"] += [x.draft_s + x.verify_s + x.accept_s for x in r]
            if rep == 0:
                res[name]["tokens"].append(g.token_ids)
same = res["head"]["tokens"] == res["headless"]["tokens"]
for name, v in res.items():
    print(f"{name:9s} rounds {len(v['draft'])}: draft {statistics.mean(v['draft']) * 1e3:.3f} ms a round, "
          f"round {statistics.mean(v['round']) * 1e3:.3f} ms")
print(f"same tokens in both arms: {same}")
