"""Synthetic result files with known properties, written through the real record writer.

Each simulated method decodes ``tokens`` tokens per turn in rounds: it drafts up to gamma tokens,
each accepted with probability ``accept`` until the first rejection; a round costs
``draft_cost * drafted + step * (1 + 0.05 * drafted)`` seconds, vanilla ``step`` per token. Timed
repeats multiply that by log-normal noise of spread ``noise``. The files are what ``run``/``compare``
write (``results.question_record`` + a ``.meta.json`` header), so every reader sees real layout.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from specharness.records import Generation, QuestionResult, Round
from specharness.results import FORMAT, meta_path, question_record
from specharness.tasks.specbench import SUBTASKS

STEP = 0.02  # seconds of one vanilla step
# option defaults as the real methods declared them when such files were written (Kangaroo's gamma was 6); each
# run header records its own (``option_defaults``), which the report reads
DEFAULTS = {"vanilla": {}, "early_exit": {"exit_layer": 2, "gamma": 6, "eta": 0.0},
            "kangaroo": {"exit_layer": 2, "eta": 0.6, "gamma": 6, "adapter": "", "draft_vocab": -1},
            "kangaroo-oracle": {"exit_layer": 2, "gamma": 6, "adapter": "", "draft_vocab": -1}}


def simulate_turn(rng: random.Random, tokens: int, gamma: int, accept: float, draft_cost: float,
                  oracle: bool = False) -> tuple[list[Round], float]:
    rounds = [Round(0, 0, 0.0, 3 * STEP, 1e-4)]  # prefill
    made, total = 1, 3 * STEP
    while made < tokens:
        k = min(gamma, tokens - made - 1)
        n = 0
        while n < k and rng.random() < accept:
            n += 1
        if oracle:  # drafting stops right after the first disagreement
            k = min(k, n + 1)
        d, v = draft_cost * k, STEP * (1 + 0.05 * k)
        rounds.append(Round(k, n, d, v, 1e-4))
        made += n + 1
        total += d + v + 1e-4
    return rounds, total


def write_run(path: Path, method: str, options: dict, questions: list[tuple], gamma: int = 0,
              accept: float = 0.0, draft_cost: float = 0.0, noise: float = 0.02, repeats: int = 3,
              tokens: int = 24, seed: int = 0, oracle: bool = False, temperature: float = 0.0,
              extra_params: int = 0, command: str = "python -m specharness compare (fixture)",
              unstable_ids: tuple = (), drafter_info: dict | None = None, looping: tuple = (),
              loop_time: float = 1.0) -> Path:
    """One result file; ``questions`` = [(question_id, subtask, n_turns)]. The turns in ``looping``
    ((question_id, 0-based turn) pairs) output one 3-token pattern over and over, in ``loop_time``
    times their simulated time (a retrieval drafter copying the loop)."""
    rng = random.Random(f"{seed}-{method}-{json.dumps(options, sort_keys=True)}")
    meta = {"format": FORMAT, "command": command, "git_commit": "fixture", "model": "fixture-model",
            "dtype": "float32", "device": "cpu", "threads": 1, "method": method, "options": options,
            "verifier": "greedy", "max_new_tokens": tokens, "temperature": temperature, "seed": 0,
            "repeats": repeats, "warmup": 0, "extra_params": extra_params, "target_params": 134_515_008,
            "option_defaults": DEFAULTS.get(method, {}),
            "created": "2026-01-01T00:00:00", **({"drafter_info": drafter_info} if drafter_info else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    meta_path(path).write_text(json.dumps(meta, indent=1))
    with open(path, "w") as fh:
        for qid, sub, n_turns in questions:
            res = QuestionResult(qid, sub, sub, method, seed=0)
            for t in range(n_turns):
                trng = random.Random(f"{seed}-{qid}-{t}-{method}-{json.dumps(options, sort_keys=True)}")
                rounds, total = simulate_turn(trng, tokens, gamma, accept, draft_cost, oracle)
                loop = (qid, t) in looping
                times = [total * (loop_time if loop else 1.0) * rng.lognormvariate(0, noise) for _ in range(repeats)]
                if qid in unstable_ids and repeats > 1:  # one repeat hit by a background process
                    times[-1] *= 1.6
                ids = [random.Random(f"{qid}-{t}-{i}").randrange(100) for i in range(tokens)]  # every method: vanilla's tokens
                if loop:
                    ids = [7, 8, 9] * (tokens // 3) + [7, 8, 9][:tokens % 3]
                res.generations.append(Generation(ids, rounds, sorted(times)[len(times) // 2], "length"))
                res.turns.append(" ".join(map(str, ids)))
                res.truncated.append(False)
                res.wall_time_repeats.append(times)
            fh.write(json.dumps(question_record(res, meta)) + "\n")
    return path


def questions(per_subtask: int = 3) -> list[tuple]:
    out = []
    for s in SUBTASKS:
        for i in range(per_subtask):
            out.append((f"{s}-{i}", s, 2 if s == "multi_turn" else 1))
    return out


def write_fixture(directory: Path, per_subtask: int = 3) -> dict[str, Path]:
    """vanilla, kangaroo (main + adapter ablation + exit-layer sweep + eta x gamma sweep),
    an oracle stop for gamma 4/6/8, an EAGLE head trained on two data sizes, and a fixed-gamma
    early exit."""
    qs = questions(per_subtask)
    files = {"vanilla": write_run(directory / "vanilla.jsonl", "vanilla", {}, qs,
                                  unstable_ids=(qs[0][0],))}

    def kangaroo(name, exit_layer=2, eta=0.6, gamma=6, adapter="adapters/default", accept=0.5, params=1_000_000):
        opts = {"exit_layer": exit_layer, "eta": eta, "gamma": gamma, "adapter": adapter}
        g = max(1, round(gamma * (1 - eta))) if eta else gamma  # a higher eta stops drafting earlier
        files[name] = write_run(directory / f"{name}.jsonl", "kangaroo", opts, qs, gamma=g, accept=accept,
                                draft_cost=STEP * (exit_layer + 1.5) / 30, extra_params=params)

    kangaroo("kangaroo")
    kangaroo("kangaroo-ffn", adapter="adapters/ffn", accept=0.55, params=2_300_000)
    kangaroo("kangaroo-headsep", adapter="adapters/separate-head", accept=0.6, params=29_000_000)
    for layer, acc in ((1, 0.35), (4, 0.55), (6, 0.6)):
        kangaroo(f"kangaroo-l{layer}", exit_layer=layer, adapter=f"adapters/l{layer}", accept=acc)
    for gamma in (4, 6, 8):
        for eta in (0.0, 0.3, 0.6, 0.9):
            if (gamma, eta) != (6, 0.6):
                kangaroo(f"kangaroo-g{gamma}-e{eta}", eta=eta, gamma=gamma)
        files[f"oracle-g{gamma}"] = write_run(
            directory / f"oracle-g{gamma}.jsonl", "kangaroo-oracle", {"exit_layer": 2, "gamma": gamma}, qs,
            gamma=gamma, accept=0.5, draft_cost=STEP * 3.5 / 30, oracle=True)
    for n, acc in ((256, 0.3), (1024, 0.45)):  # one learned drafter trained on two data sizes
        files[f"eagle-{n}"] = write_run(
            directory / f"eagle-{n}.jsonl", "eagle", {"head": f"heads/{n}"}, qs, gamma=5, accept=acc,
            draft_cost=STEP * 2 / 30, drafter_info={"training": {
                "train_conversations": n, "held_out_conversations": 55, "top1": acc, "top1_own_prefix": acc - 0.05}})
    files["early_exit"] = write_run(directory / "early_exit.jsonl", "early_exit",
                                    {"exit_layer": 2, "gamma": 6, "eta": 0.0}, qs, gamma=6, accept=0.1,
                                    draft_cost=STEP * 3 / 30)
    return files
