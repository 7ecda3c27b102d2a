"""Kangaroo's rounds by how many tokens they drafted, in every committed Kangaroo result file at eta 0.6
(the default) with a per-round record: how often a round drafts 4+ tokens, and the tokens per round a cap
of 3 drafts would keep (a round that had more than 3 drafts accepted would lose the rest; no other round
changes under greedy decoding, since the drafts before the cap are the same)."""
import collections
import glob
import json
import os

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
print(f"{'file':88s} {'rounds':>7s} {'CR':>6s} {'CR cap 3':>8s} {'4+ drafted':>10s} {'4+ accepted':>11s}")
for path in sorted(set(glob.glob("results/**/kangaroo*.jsonl", recursive=True))):
    name = os.path.basename(path)
    if any(k in name for k in ("eta=", "gamma=", "oracle", "adapter=", "exit_layer", "draft_vocab", "budget")) or "float32" in name and "sweeps" in path:
        continue  # other settings than the default's
    drafted, rounds, tokens, capped, long_accept = collections.Counter(), 0, 0, 0, 0
    for line in open(path):
        record = json.loads(line)
        for choice in record.get("choices", []):
            for rd in choice.get("rounds") or []:
                for d, a in zip(rd["drafted"], rd["accepted"]):
                    rounds, tokens, capped = rounds + 1, tokens + a + 1, capped + min(a, 3) + 1
                    drafted[d >= 4] += 1
                    long_accept += a >= 4
    if rounds:
        print(f"{path[8:96]:88s} {rounds:7d} {tokens / rounds:6.3f} {capped / rounds:8.3f} "
              f"{drafted[True] / rounds:10.2%} {long_accept:11d}")
