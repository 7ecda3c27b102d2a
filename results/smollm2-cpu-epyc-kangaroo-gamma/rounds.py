"""Kangaroo's rounds by how many tokens they drafted, in every committed Kangaroo result file run at eta 0.6
and gamma 6 (the defaults until 9f94f4b; read from each header) with a per-round record: how often a round
drafts 4+ tokens, and the tokens per round a cap of 3 drafts would keep, an estimate: a round that had more
than 3 drafts accepted keeps 3 (after it, a capped run's rounds would start elsewhere)."""
import collections
import glob
import json
import os

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
print(f"{'file':88s} {'rounds':>7s} {'CR':>6s} {'CR cap 3':>8s} {'4+ drafted':>10s} {'4+ accepted':>11s}")
for path in sorted(set(glob.glob("results/**/kangaroo*.jsonl", recursive=True))):
    name = os.path.basename(path)
    meta = path[:-len(".jsonl")] + ".meta.json"
    options = json.load(open(meta)).get("options", {}) if os.path.exists(meta) else {}
    if (any(k in name for k in ("eta=", "gamma=", "oracle", "adapter=", "exit_layer", "draft_vocab", "budget"))
            or "float32" in name and "sweeps" in path or options.get("gamma", 6) != 6):
        continue  # other settings than eta 0.6, gamma 6
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
