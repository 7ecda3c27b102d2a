"""The answers of a self-distillation set as one UTF-8 text: a static corpus for ``sam -o corpus=``.
SmolLM2 wrote them itself to user turns it also wrote (no Spec-Bench text; sam refuses a corpus that
quotes a benchmark question). Usage: python corpus.py DATA_DIR OUT.txt"""
import sys

import datasets

from specharness.model.loading import load_hf

data, out = sys.argv[1], sys.argv[2]
_, tok, _ = load_hf("smollm2", "float32", "cpu")
ds = datasets.load_from_disk(data)
answers = []
for row in ds:
    ids = [t for t, m in zip(row["input_ids"], row["loss_mask"]) if m and t not in tok.all_special_ids]
    answers.append(tok.decode(ids).strip())
with open(out, "w", encoding="utf-8") as f:
    f.write("\n\n".join(answers) + "\n")
print(f"{len(answers)} answers, {sum(map(len, answers))} characters -> {out}")
