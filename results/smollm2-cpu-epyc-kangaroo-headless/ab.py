"""A/B: Kangaroo's round with its last draft step run without the head (a variant, defined here) against the
shipped drafter (every step through the head, the last one's logits unused), interleaved on one compiled target,
identical outputs asserted. Written at commit 082b997's drafter; the variant was not adopted (README.md).

usage: python ab.py [QUESTIONS_JSONL] [PROMPTS] [REPEATS]   (from the repository root, nothing else running)
"""
import json
import statistics
import sys

import torch

from specharness import draft_vocab
from specharness.api import Proposal
from specharness.engine import generate
from specharness.plugins import build_registry
from specharness.session import EngineRequest, Session
import specharness.methods.kangaroo.drafter as kangaroo


class HeadlessLastStep(kangaroo.KangarooDrafter):
    """The variant: the round's last step (its logits unused) runs the stack's head-less graph."""

    def _step(self, token, pos, head=True):
        t, l = self.t, self.exit_layer
        return t.forward(torch.tensor([token], device=t.device), self.cache, pos, 0, l + 1, head=head,
                         capture=(l - 1,), skip=self.skip, stack=self.stack)

    def propose(self, state):
        t, l, pos = self.t, self.exit_layer, state.pos
        budget = min(self.gamma, state.max_draft, state.budget)
        tokens, qs = [], []
        out = self._step(state.ids[-1], pos)
        hs = [out.captured[l - 1]]
        more = budget > 0
        while more:
            d = draft_vocab.draw(out.logits[-1], self.rows, t.vocab_size, state.temperature, state.generator)
            if d.q is not None:
                qs.append(d.q)
            tokens.append(d.token)
            more = len(tokens) < budget and self.keep_drafting(state, len(tokens) - 1, d.token, d.confidence)
            out = self._step(d.token, pos + len(tokens), head=more)
            hs.append(out.captured[l - 1])
        return Proposal(tokens, torch.stack(qs) if qs else None, torch.cat(hs), l)


bench = sys.argv[1] if len(sys.argv) > 1 else "../shared/specbench/question.jsonl"
n_prompts = int(sys.argv[2]) if len(sys.argv) > 2 else 24
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 2
torch.set_num_threads(2)
s = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
t = s.target
accept = build_registry().verifier("greedy").accept
new = kangaroo.build(t, {}, HeadlessLastStep)  # the same stack and graphs; only the variant runs its head-less graph
old = kangaroo.build(t, {})
t.expect_widths(new.max_width)
qs = [json.loads(line) for line in open(bench)]
step = max(1, len(qs) // n_prompts)
prompts = [t.chat_ids([{"role": "user", "content": q["turns"][0]}]) for q in qs[7::step][:n_prompts]]
with t.backend.in_background():
    for d in (new, old):
        generate(t, d, accept, prompts[0], 16)
t.precompile(new.max_width)
for d in (new, old):
    generate(t, d, accept, prompts[1], 16)
graphs = len(t.backend.graphs)
per_token = {"new": [], "old": []}
draft_ms = {"new": [], "old": []}
for rep in range(repeats):
    for i, p in enumerate(prompts):
        order = [("new", new), ("old", old)] if (i + rep) % 2 == 0 else [("old", old), ("new", new)]
        outs = {}
        for name, d in order:
            g = generate(t, d, accept, p, 128)
            outs[name] = g.token_ids
            rounds = g.rounds[1:]
            draft_ms[name].append(1e3 * statistics.mean(r.draft_s for r in rounds))
            per_token[name].append(g.wall_time / len(g.token_ids))
        assert outs["new"] == outs["old"], f"outputs differ on prompt {i}"
assert len(t.backend.graphs) == graphs, "a graph was compiled while timing"
ratio = [o / n for n, o in zip(per_token["new"], per_token["old"])]  # > 1: the new round is faster
print(f"{len(prompts)} prompts x {repeats} repeats, 128 new tokens, bfloat16 max-autotune, 2 threads, outputs identical")
for name in ("old", "new"):
    print(f"{name}: draft ms/round median {statistics.median(draft_ms[name]):.3f}, "
          f"ms/token median {1e3 * statistics.median(per_token[name]):.2f}")
lo, hi = sorted(ratio)[len(ratio) // 10], sorted(ratio)[-(len(ratio) // 10) - 1]
print(f"speed new/old: median {statistics.median(ratio):.4f}, mean {statistics.mean(ratio):.4f}, "
      f"10th-90th percentile [{lo:.3f}, {hi:.3f}], new faster in {sum(r > 1 for r in ratio)}/{len(ratio)}")
try:
    from scipy.stats import wilcoxon
    print(f"Wilcoxon (log ratio), two-sided p {wilcoxon([__import__('math').log(r) for r in ratio]).pvalue:.3g}")
except ImportError:
    pass
