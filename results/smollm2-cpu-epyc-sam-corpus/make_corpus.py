"""sam's static corpus (``-o corpus=FILE``) from the target's own answers in the self-distillation set:
the shared recipe's training conversations (its held-out ones left out, as every trained drafter leaves
them), each answer's text on its own, separated by blank lines. No benchmark text: the user turns are
the model's own (Magpie-style), and sam refuses a corpus that quotes a Spec-Bench question.

    python results/smollm2-cpu-epyc-sam-corpus/make_corpus.py CONVERSATIONS OUT.txt

reads the set that ``python -m specharness train draft-vocab -o conversations=CONVERSATIONS`` wrote
(the recipe's other options at their defaults) from the cache.
"""
import sys

from specharness import selfdistill as sd
from specharness.model import TargetModel
from specharness.options import resolve_options

options = resolve_options("make_corpus", sd.RECIPE_OPTIONS, [f"conversations={sys.argv[1]}"])
target = TargetModel.load("smollm2", "float32", "cpu")
ds, _ = sd.load(sd.data_dir(target, options, sd.recipe(options)))
train_rows, _ = sd.split_rows(len(ds), options)
answers = [target.tokenizer.decode(ids[mask].tolist(), skip_special_tokens=True).strip()
           for ids, mask in sd.examples(ds, train_rows)]
answers = [a for a in answers if a]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("\n\n".join(answers) + "\n")
print(f"{len(answers)} answers of {len(ds)} conversations ({len(train_rows)} trained on), "
      f"{sum(map(len, answers))} characters -> {sys.argv[2]}")
