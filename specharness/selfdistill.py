"""Self-distillation data: the target writes its own training conversations (Magpie-style).

No hub, no borrowed corpus, and never Spec-Bench's questions (they are the test set). The target
model samples a user turn from its chat template's user prefix (the text a template puts before a
user message; the model continues it until it closes the turn), then answers that turn itself.
Drafters trained on this data learn to predict *this* target on text it actually writes. With
``context`` > 0 that share of the conversations gets a user turn that carries a passage: one of the
target's own answers under a generic instruction (``CONTEXT_INSTRUCTIONS``), so its answer reads a
long prompt as summaries and retrieval do. Measured for Kangaroo, it did not raise agreement on
Spec-Bench (``results/smollm2-kangaroo-specbench-agreement``); more conversations did.

What is stored (one directory):

- ``data/``: a ``datasets.Dataset`` (Arrow, memory-mapped) with one row per conversation:
  ``input_ids`` (prompt through the chat template + the target's answer, its end-of-turn token
  included when produced), ``prompt_len``, ``loss_mask`` (see below), ``user`` (the sampled user
  turn as text), ``stop`` ("eos" or "length").
- ``generation.json``: the settings, model identity, token counts, wall time and FLOPs.
- ``features.safetensors`` (optional, ``capture_layers``/``topk``): per-token tensors captured for
  free while generating, concatenated over rows in dataset order (row i spans
  ``offsets[i]:offsets[i+1]``): ``hidden.{l}`` = the hidden state *entering* decoder layer l at
  every position, ``topk_ids``/``topk_probs`` = the top-k of the target's next-token distribution
  (temperature 1) at every position whose ``loss_mask`` is 1 (ids -1 / probs 0 elsewhere).

Loss-mask convention (shared by every trainer): ``loss_mask[t] == 1`` when the prediction made at
position t (of token t + 1) is trained, i.e. token t + 1 belongs to the target's answer. So a
trainer computes its outputs at every position and keeps those where the mask is 1; ``examples()``
yields exactly (input_ids, loss_mask) so another trainer (Medusa) can derive its own targets.

Generation runs batched through the target's own transformers module (a hand-driven decode loop
with a ``DynamicCache``; ``generate()`` itself is ~3x slower on this CPU) in the target's dtype, or in
``dtype`` (``gen_dtype``): a bfloat16 copy writes about twice as fast on CPUs with bfloat16 matmuls
(``results/smollm2-kangaroo-specbench-agreement/gen_speed.txt``), and its text is what the benchmark's
default bfloat16 engine decodes. The float32 target then computes the features (teacher-forced).
Answers are greedy by default: that is the decoding the benchmark runs, so the drafter trains on
the states it will meet.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator

import torch

from .errors import UsageError
from .options import OptionSpec
from .paths import cache_root

FORMAT_VERSION = 1
GEN_DTYPES = ("float32", "bfloat16")  # the dtypes a target may write its data in (``gen_dtype``)


@dataclass(frozen=True)
class GenerationSettings:
    conversations: int = 640  # conversations to write (after de-duplicating user turns)
    max_user_tokens: int = 64  # a sampled user turn longer than this is dropped
    min_user_tokens: int = 4
    max_answer_tokens: int = 256  # answers are cut here (stop = "length")
    user_temperature: float = 1.0  # Magpie samples the user turn at temperature 1
    answer_temperature: float = 0.0  # 0 = greedy, the benchmark's decoding
    batch_size: int = 32
    seed: int = 0
    capture_layers: tuple[int, ...] = ()  # keep hidden states entering these layers (features)
    topk: int = 0  # keep the target's top-k next-token probabilities at trained positions
    context: float = 0.0  # share of conversations whose user turn carries a passage (``context_turns``)
    dtype: str = ""  # the dtype the target writes the text in ("" = the target's own); see ``generation_dtype``

    def validate(self, n_layers: int) -> None:
        checks = [
            (self.conversations >= 1, "conversations must be >= 1"),
            (self.max_user_tokens >= self.min_user_tokens >= 1, "need max_user_tokens >= min_user_tokens >= 1"),
            (self.max_answer_tokens >= 1, "max_answer_tokens must be >= 1"),
            (self.user_temperature > 0, "user_temperature must be > 0 (Magpie samples the user turn)"),
            (self.answer_temperature >= 0, "answer_temperature must be >= 0 (0 = greedy)"),
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (all(0 <= l < n_layers for l in self.capture_layers),
             f"capture_layers must lie in [0, {n_layers - 1}]"),
            (self.topk >= 0, "topk must be >= 0"),
            (0.0 <= self.context <= 0.9, "context must lie in [0, 0.9] (a share of the conversations)"),
            (self.dtype in ("", *GEN_DTYPES), f"dtype must be one of {', '.join(GEN_DTYPES)}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise UsageError(f"self-distillation data: {msg}")

    def text_key(self) -> dict:
        """The settings that decide the text (features can be recomputed for other layers)."""
        d = asdict(self)
        d.pop("capture_layers")
        d.pop("topk")
        d.pop("batch_size")  # batching changes rounding only, never the recipe
        if not self.context:
            d.pop("context")  # data written before the option existed keeps its name
        d.pop("dtype")  # named by the model identity (``generation_dtype``), as before the option existed
        return d

    @property
    def n_context(self) -> int:
        return int(round(self.conversations * self.context))


# The recipe every trainer offers with the same names, defaults and ranges: trainers given the same
# values share one generated data set (``default_dir`` names it after the model and the recipe).
# ``held_out`` and ``train_conversations`` choose rows of that set (``split_rows``), not its text.
RECIPE_OPTIONS = [
    OptionSpec("conversations", "int", 512, "self-generated conversations (shared recipe: trainers with the "
               "same values reuse one data set)", min=8),
    OptionSpec("max_answer_tokens", "int", 256, "longest self-generated answer (shared recipe)", min=8),
    OptionSpec("seed", "int", 0, "seed of the data sampling (shared recipe), the held-out split, shuffling and "
               "initialisation"),
    OptionSpec("held_out", "float", 0.05, "share of conversations held out for agreement", min=0.0, max=0.5),
    OptionSpec("train_conversations", "int", 0, "train on this many of the non-held-out conversations (0 = all; "
               "smaller sets are nested in larger ones and the held-out set stays the same: a data-scaling "
               "curve)", min=0),
    OptionSpec("context", "float", 0.0, "share of conversations whose user turn carries a passage the target "
               "wrote (another conversation's answer) under a generic instruction: answers that read a long "
               "prompt, as summaries and retrieval do (shared recipe)", min=0.0, max=0.9),
    OptionSpec("gen_batch", "int", 32, "conversations generated per batch (speed; it also changes which user turns "
               "are drawn and batch rounding, not the recipe)", min=1),
    OptionSpec("gen_dtype", "str", "", "dtype the target writes the data in (empty = the trainer's, float32). "
               "bfloat16 writes about 2x faster on CPUs with bfloat16 matmuls and is the dtype the benchmark decodes "
               "in; its text differs from float32's only at near-ties. Features and soft labels always come from "
               "the trainer's float32 target (shared recipe)", choices=("", *GEN_DTYPES)),
    OptionSpec("data", "str", "", "self-distillation data directory (default: the shared one in the cache, "
               "named after the model and the recipe; reused when it matches)"),
]


def recipe(options: dict, capture_layers: tuple[int, ...] = (), topk: int = 0) -> "GenerationSettings":
    """The generation settings that ``RECIPE_OPTIONS`` values (and a trainer's features) ask for."""
    return GenerationSettings(conversations=options["conversations"], max_answer_tokens=options["max_answer_tokens"],
                              batch_size=options["gen_batch"], seed=options["seed"],
                              capture_layers=tuple(capture_layers), topk=topk, context=options.get("context", 0.0),
                              dtype=options.get("gen_dtype", ""))


def default_dir(target, settings: "GenerationSettings") -> Path:
    """The shared data directory for this model, its dtype and the text recipe (features do not
    change its name). A float32 target's name leaves the dtype out, as it did before other dtypes
    were named: the answers differ by dtype, so each dtype gets its own directory."""
    key, dtype = settings.text_key(), generation_dtype(target, settings)
    if dtype != "float32":
        key = {**key, "dtype": dtype}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    return cache_root() / "selfdistill" / f"{target.name}-{digest}"


def data_dir(target, options: dict, settings: "GenerationSettings") -> Path:
    """``-o data=DIR`` when given, else the shared directory."""
    return Path(options["data"]).expanduser() if options["data"] else default_dir(target, settings)


def model_identity(target, dtype: str = "") -> dict:
    """The model that wrote a data set: ``dtype`` is the one it wrote in (default: the target's)."""
    return {"name": target.name, "n_layers": target.n_layers, "hidden_size": target.hidden_size,
            "vocab_size": target.vocab_size, "dtype": dtype or _dtype_name(target)}


def _dtype_name(target) -> str:
    return str(target.dtype).removeprefix("torch.")


def generation_dtype(target, settings: "GenerationSettings") -> str:
    """The dtype the text is written in: ``settings.dtype``, or the target's own when empty."""
    return settings.dtype or _dtype_name(target)


def _writer(target, settings: "GenerationSettings"):
    """The transformers module that writes the text: the target's own, or a copy of it in the
    generation dtype (the target itself stays in its dtype for the features and the training)."""
    if generation_dtype(target, settings) == _dtype_name(target):
        return target.hf
    import copy
    from .model.loading import DTYPES
    return copy.deepcopy(target.hf).to(DTYPES[settings.dtype])


def forward_flops(target, n_tokens: int, mean_context: float) -> float:
    """Matmul FLOPs of a target forward over ``n_tokens`` attending to ``mean_context`` keys.

    2 x parameters per token (the tied head counted once, as the matmul it is; the embedding lookup
    is free) + 4 x layers x context x (heads x head_dim) for attention scores and values.
    """
    per_token = 2 * target.n_parameters + 4 * target.n_layers * mean_context * target.n_heads * target.head_dim
    return float(n_tokens * per_token)


def user_prefix_ids(target) -> list[int]:
    """The chat template's text before a user message (system turn included), as token ids."""
    tok = target.tokenizer
    if tok is None or not tok.chat_template:
        raise UsageError(f"model '{target.name}' has no chat template; Magpie-style self-distillation "
                         "needs one to find the user prefix")
    sentinel = "\x00SPECHARNESS_USER\x00"
    text = tok.apply_chat_template([{"role": "user", "content": sentinel}], add_generation_prompt=False,
                                   tokenize=False)
    if sentinel not in text:
        raise UsageError(f"cannot locate the user turn in '{target.name}''s chat template")
    return tok(text.split(sentinel)[0], add_special_tokens=False)["input_ids"]


def _end_of_turn(target) -> set[int]:
    ids = set(target.eos_ids)
    tok = target.tokenizer
    if tok is not None and tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    if not ids:
        raise UsageError(f"model '{target.name}' has no end-of-turn token; cannot self-distill")
    return ids


class _BatchDecoder:
    """Left-padded batched decoding with the target's transformers module and a DynamicCache.

    Finished rows leave the batch (``batch_select_indices``), so a long answer never makes the
    other rows pay for padding steps. Optionally captures hidden states entering given layers and
    the top-k of the next-token distribution at every generated step.
    """

    def __init__(self, target, capture_layers=(), topk: int = 0, hf=None) -> None:
        self.t = target
        self.hf = target.hf if hf is None else hf  # the module that decodes (``_writer``)
        self.capture_layers = tuple(capture_layers)
        self.topk = topk
        self.computed_tokens = 0  # every position run through the model, padding included
        self.flops = 0.0

    @torch.inference_mode()
    def run(self, prompts: list[list[int]], max_new: int, temperature: float, stop: set[int],
            generator: torch.Generator, pad_id: int) -> list[dict]:
        from transformers import DynamicCache
        t, dev = self.t, self.t.device
        B = len(prompts)
        P = max(len(p) for p in prompts)
        ids = torch.full((B, P), pad_id, dtype=torch.long, device=dev)
        mask = torch.zeros((B, P), dtype=torch.long, device=dev)
        for i, p in enumerate(prompts):
            ids[i, P - len(p):] = torch.tensor(p, device=dev)
            mask[i, P - len(p):] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        want_hidden = bool(self.capture_layers)
        out = self.hf(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                   output_hidden_states=want_hidden, logits_to_keep=1)
        self.computed_tokens += B * P
        self.flops += forward_flops(t, B * P, P / 2)
        rows = [{"prompt": p, "new": [], "hidden": {l: [] for l in self.capture_layers},
                 "topk_ids": [], "topk_probs": [], "stop": "length"} for p in prompts]
        for i, r in enumerate(rows):  # prompt positions' states
            for l in self.capture_layers:
                r["hidden"][l].append(out.hidden_states[l][i, P - len(r["prompt"]):].float().clone())
        active = list(range(B))  # row index of each batch slot
        logits = out.logits[:, -1].float()
        length = P
        for step in range(max_new):
            if temperature > 0:
                probs = torch.softmax(logits / temperature, -1)
                nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
            else:
                nxt = logits.argmax(-1)
            if self.topk:
                p1 = torch.softmax(logits, -1)
                tp, ti = p1.topk(self.topk, -1)
            keep = []
            for slot, row in enumerate(active):
                tok = int(nxt[slot])
                r = rows[row]
                r["new"].append(tok)
                if self.topk:
                    r["topk_ids"].append(ti[slot].to(torch.int32))
                    r["topk_probs"].append(tp[slot])
                if tok in stop:
                    r["stop"] = "eos"
                elif step + 1 < max_new:
                    keep.append(slot)
            if not keep:
                break
            if len(keep) < len(active):
                idx = torch.tensor(keep, device=dev)
                cache.batch_select_indices(idx)
                mask, pos, nxt = mask[idx], pos[idx], nxt[idx]
                active = [active[s] for s in keep]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=dev)], -1)
            pos = pos[:, -1:] + 1
            out = self.hf(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, cache=cache,
                       use_cache=True, output_hidden_states=want_hidden)
            length += 1
            self.computed_tokens += len(active)
            self.flops += forward_flops(t, len(active), length)
            logits = out.logits[:, -1].float()
            for slot, row in enumerate(active):
                for l in self.capture_layers:
                    rows[row]["hidden"][l].append(out.hidden_states[l][slot, -1:].float().clone())
        return rows


def _sample_user_turns(target, s: GenerationSettings, gen: torch.Generator, progress: bool,
                       partial: Path | None = None, hf=None) -> tuple[list[str], dict]:
    """User turns; with ``partial`` every batch is saved there and an interrupted run resumes."""
    from tqdm import tqdm
    tok = target.tokenizer
    prefix = user_prefix_ids(target)
    stop = _end_of_turn(target)
    dec = _BatchDecoder(target, hf=hf)
    seen, turns = set(), []
    attempts, max_attempts = 0, s.conversations * 6
    key = {"model": model_identity(target, generation_dtype(target, s)), "settings": s.text_key()}
    if partial is not None and partial.is_file():
        saved = json.loads(partial.read_text())
        if saved.get("key") == key:
            turns, attempts = saved["turns"][:s.conversations], saved["attempts"]
            dec.computed_tokens, dec.flops = saved["computed_tokens"], saved["flops"]
            seen = set(turns)
            gen.set_state(torch.tensor(saved["rng"], dtype=torch.uint8))
    bar = tqdm(total=s.conversations, initial=len(turns), desc="user turns", unit="turn", disable=not progress)
    while len(turns) < s.conversations and attempts < max_attempts:
        b = min(s.batch_size * 2, max_attempts - attempts)  # short sequences: a wider batch is cheap
        rows = dec.run([prefix] * b, s.max_user_tokens, s.user_temperature, stop, gen, pad_id=min(stop))
        attempts += b
        for r in rows:
            new = r["new"]
            if r["stop"] != "eos" or len(new) - 1 < s.min_user_tokens:
                continue
            text = tok.decode(new[:-1], skip_special_tokens=True).strip()
            if not text or text in seen:
                continue
            seen.add(text)
            turns.append(text)
            bar.update(1)
            if len(turns) == s.conversations:
                break
        if partial is not None:
            partial.write_text(json.dumps({"key": key, "turns": turns, "attempts": attempts, "flops": dec.flops,
                                           "computed_tokens": dec.computed_tokens,
                                           "rng": gen.get_state().tolist()}))
    bar.close()
    if not turns:
        raise UsageError(f"model '{target.name}' wrote no usable user turn in {attempts} attempts")
    return turns, {"attempts": attempts, "computed_tokens": dec.computed_tokens, "flops": dec.flops}


# Generic instructions for a passage (written for this recipe; no benchmark's text). ``{q}`` takes
# another sampled user turn, so a question meets a passage it must be answered from, as in retrieval.
CONTEXT_INSTRUCTIONS = (
    "Summarize the following text.",
    "Summarize the text below in two or three sentences.",
    "What is the main point of this text?",
    "List the key facts in the following text.",
    "Rewrite the following text in simpler words.",
    "Explain the following text to a beginner.",
    "Give the following text a title and a one-paragraph summary.",
    "Continue the following text.",
    "Using only the text below, answer the question: {q}",
    "Read the passage and answer: {q}",
)
MIN_PASSAGE_TOKENS = 32


def context_turns(tok, user_turns: list[str], answers: list[list[int]], n: int, seed: int,
                  min_tokens: int = MIN_PASSAGE_TOKENS) -> list[str]:
    """``n`` user turns that each carry a passage: an answer the target wrote (at least
    ``min_tokens`` long) under one of ``CONTEXT_INSTRUCTIONS``, before or after it; a question
    instruction takes another of ``user_turns``. Deterministic in ``seed``."""
    g = torch.Generator().manual_seed(seed + 1)
    pool = [i for i, a in enumerate(answers) if len(a) >= min_tokens]
    if n and not pool:
        raise UsageError(f"self-distillation data: no answer of {min_tokens}+ tokens to use as a passage; "
                         "raise conversations, or set context=0")
    order = [pool[int(i)] for i in torch.randperm(len(pool), generator=g)]
    turns = []
    for k in range(n):
        j = order[k % len(order)]
        passage = tok.decode(answers[j], skip_special_tokens=True).strip()
        instruction = CONTEXT_INSTRUCTIONS[int(torch.randint(len(CONTEXT_INSTRUCTIONS), (1,), generator=g))]
        if "{q}" in instruction:
            other = int(torch.randint(len(user_turns), (1,), generator=g))
            turns.append(f"{instruction.format(q=user_turns[other])}\n\n{passage}")
        elif int(torch.randint(2, (1,), generator=g)):
            turns.append(f"{passage}\n\n{instruction}")
        else:
            turns.append(f"{instruction}\n\n{passage}")
    return turns


def generate(target, settings: GenerationSettings, out_dir: str | Path, progress: bool = True):
    """Write a self-distillation dataset to ``out_dir`` and return it (a ``datasets.Dataset``)."""
    import datasets
    from safetensors.torch import save_file
    from tqdm import tqdm

    s = settings
    s.validate(target.n_layers)
    writer = _writer(target, s)
    if writer is not target.hf:  # states of another dtype's forward: the trainer's target recomputes them
        s = replace(s, capture_layers=(), topk=0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator(device=target.device).manual_seed(s.seed)
    started = time.perf_counter()
    parts = out / "partial"  # per-batch checkpoints: an interrupted generation resumes
    parts.mkdir(exist_ok=True)
    done_before = json.loads((parts / "time.json").read_text()) if (parts / "time.json").is_file() else {}
    n_ctx = s.n_context
    general = replace(s, conversations=s.conversations - n_ctx, context=0.0)
    turns, user_stats = _sample_user_turns(target, general, gen, progress, parts / "user_turns.json", writer)
    t_users = time.perf_counter() - started + done_before.get("user_turns", 0.0)
    (parts / "time.json").write_text(json.dumps({**done_before, "user_turns": t_users}))

    stop = _end_of_turn(target)
    dec = _BatchDecoder(target, s.capture_layers, s.topk, writer)
    t_ans0 = time.perf_counter()
    answers_before = done_before.get("answers", 0.0)

    def answer(user_turns: list[str], desc: str, shard_tag: str) -> list[dict]:
        """The target's answers to ``user_turns``, in their order; every batch is saved to ``parts``."""
        prompts = [target.chat_ids([{"role": "user", "content": u}]) for u in user_turns]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
        results: list[dict | None] = [None] * len(prompts)
        bar = tqdm(total=len(prompts), desc=desc, unit="conv", disable=not progress)
        for b0 in range(0, len(order), s.batch_size):
            idx = order[b0:b0 + s.batch_size]
            shard = parts / f"answers{shard_tag}-b{s.batch_size}-{b0:06d}.pt"
            saved = torch.load(str(shard), weights_only=True) if shard.is_file() else None
            if saved is not None and saved["prompts"] != [prompts[i] for i in idx]:
                saved = None  # written for other user turns: redo
            if saved is not None:
                rows, gen_state = saved["rows"], saved["rng"]
                gen.set_state(gen_state)
                dec.computed_tokens += saved["computed_tokens"]
                dec.flops += saved["flops"]
            else:
                c0, f0 = dec.computed_tokens, dec.flops
                rows = dec.run([prompts[i] for i in idx], s.max_answer_tokens, s.answer_temperature, stop, gen,
                               pad_id=min(stop))
                torch.save({"rows": rows, "rng": gen.get_state(), "prompts": [prompts[i] for i in idx],
                            "computed_tokens": dec.computed_tokens - c0, "flops": dec.flops - f0}, str(shard))
                (parts / "time.json").write_text(json.dumps(
                    {"user_turns": t_users, "answers": answers_before + time.perf_counter() - t_ans0}))
            for i, r in zip(idx, rows):
                results[i] = r
            bar.update(len(idx))
        bar.close()
        return results

    results = answer(turns, "answers", "")
    if n_ctx:  # passages are the answers just written: the target reads its own text
        more = context_turns(target.tokenizer, turns, [r["new"][:-1] if r["stop"] == "eos" else r["new"]
                                                        for r in results], n_ctx, s.seed,
                             min(MIN_PASSAGE_TOKENS, s.max_answer_tokens // 2))
        turns, results = turns + more, results + answer(more, "answers with a passage", "-context")
    t_answers = answers_before + time.perf_counter() - t_ans0

    cols = {"input_ids": [], "prompt_len": [], "loss_mask": [], "user": [], "stop": []}
    feats: dict[str, list[torch.Tensor]] = {f"hidden.{l}": [] for l in s.capture_layers}
    if s.topk:
        feats["topk_ids"], feats["topk_probs"] = [], []
    offsets = [0]
    for u, r in zip(turns, results):
        seq = r["prompt"] + r["new"]
        n, P = len(seq), len(r["prompt"])
        mask = [0] * n
        for t_ in range(P - 1, n - 1):
            mask[t_] = 1
        cols["input_ids"].append(seq)
        cols["prompt_len"].append(P)
        cols["loss_mask"].append(mask)
        cols["user"].append(u)
        cols["stop"].append(r["stop"])
        offsets.append(offsets[-1] + n)
        for l in s.capture_layers:
            h = torch.cat(r["hidden"][l])[:n]  # the last token's state is captured only if it ran
            if h.shape[0] < n:  # the final token (eos or cut) never entered the model
                h = torch.cat([h, torch.zeros(n - h.shape[0], h.shape[1])])
            feats[f"hidden.{l}"].append(h)
        if s.topk:
            ids = torch.full((n, s.topk), -1, dtype=torch.int32)
            probs = torch.zeros((n, s.topk))
            # the distribution that chose answer token j sits at position P - 1 + j
            k = len(r["topk_ids"])
            ids[P - 1:P - 1 + k] = torch.stack(r["topk_ids"])
            probs[P - 1:P - 1 + k] = torch.stack(r["topk_probs"])
            feats["topk_ids"].append(ids)
            feats["topk_probs"].append(probs)
    ds = datasets.Dataset.from_dict(cols, features=datasets.Features({
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "prompt_len": datasets.Value("int32"),
        "loss_mask": datasets.Sequence(datasets.Value("int8")),
        "user": datasets.Value("string"),
        "stop": datasets.Value("string"),
    }))
    if (out / "data").exists():
        import shutil
        shutil.rmtree(out / "data")
    ds.save_to_disk(str(out / "data"))
    if feats:
        tensors = {k: torch.cat(v).contiguous() for k, v in feats.items()}
        tensors["offsets"] = torch.tensor(offsets, dtype=torch.int64)
        save_file(tensors, str(out / "features.safetensors"))
    n_tokens = offsets[-1]
    n_answer = sum(len(r["new"]) for r in results)
    meta = {
        "format": FORMAT_VERSION,
        "model": model_identity(target, generation_dtype(target, s)),
        "settings": {**asdict(s), "capture_layers": list(s.capture_layers)},
        "conversations": len(turns),
        "tokens": n_tokens,
        "answer_tokens": n_answer,
        "trained_positions": int(sum(sum(m) for m in cols["loss_mask"])),
        "stopped_at_eos": sum(1 for x in cols["stop"] if x == "eos"),
        "user_turn_attempts": user_stats["attempts"],
        "wall_time_s": {"user_turns": t_users, "answers": t_answers, "total": t_users + t_answers},
        "flops": {"user_turns": user_stats["flops"], "answers": dec.flops,
                  "total": user_stats["flops"] + dec.flops},
        "computed_tokens": {"user_turns": user_stats["computed_tokens"], "answers": dec.computed_tokens},
        "context_conversations": n_ctx,
        "source": "Magpie-style self-generation from the chat template's user prefix; no external data"
                  + ("; user turns with a passage: the target's own answers under CONTEXT_INSTRUCTIONS" if n_ctx else ""),
    }
    (out / "generation.json").write_text(json.dumps(meta, indent=1))
    import shutil
    shutil.rmtree(parts, ignore_errors=True)
    return ds


def load(out_dir: str | Path):
    """(dataset, generation metadata) from a directory written by ``generate``."""
    import datasets
    out = Path(out_dir)
    if not (out / "generation.json").is_file() or not (out / "data").is_dir():
        raise UsageError(f"'{out_dir}' holds no self-distillation dataset (generation.json + data/)")
    meta = json.loads((out / "generation.json").read_text())
    return datasets.load_from_disk(str(out / "data")), meta


def matches(meta: dict, target, settings: GenerationSettings) -> bool:
    """Whether stored data was written by this model with this recipe (features aside)."""
    stored = GenerationSettings(**{**meta["settings"], "capture_layers": tuple(meta["settings"]["capture_layers"])})
    return (meta.get("format") == FORMAT_VERSION
            and meta["model"] == model_identity(target, generation_dtype(target, settings))
            and stored.text_key() == settings.text_key())


def load_or_generate(target, settings: GenerationSettings, out_dir: str | Path, progress: bool = True):
    """Reuse the dataset in ``out_dir`` when it was written by this model with this recipe. Another
    data set there is replaced only in the shared cache directory (``default_dir``: a stale format);
    in a directory the user named, it is refused, never overwritten."""
    out = Path(out_dir)
    if (out / "generation.json").is_file():
        ds, meta = load(out)
        if matches(meta, target, settings):
            return ds, meta, True
        if out.resolve() != default_dir(target, settings).resolve():
            raise UsageError(f"'{out_dir}' holds self-distillation data of another model, dtype or recipe "
                             f"({meta['model'].get('dtype')}, {meta['conversations']} conversations); "
                             "name another -o data=DIR, or delete that one to regenerate it")
    from .results import check_folder
    check_folder(out, "-o data")  # before minutes of generation, not when it saves
    ds = generate(target, settings, out, progress)
    return ds, json.loads((out / "generation.json").read_text()), False


def load_features(out_dir: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    path = Path(out_dir) / "features.safetensors"
    if not path.is_file():
        raise UsageError(f"'{out_dir}' holds no captured features; regenerate with capture_layers/topk")
    return load_file(str(path))


@torch.inference_mode()
def compute_features(target, dataset, layers: tuple[int, ...], topk: int, progress: bool = True) -> dict[str, torch.Tensor]:
    """Teacher-forced features for an existing dataset (same layout as captured ones)."""
    from tqdm import tqdm
    hidden = {l: [] for l in layers}
    ids_all, probs_all, offsets = [], [], [0]
    L = target.n_layers
    for input_ids, loss_mask in tqdm(examples(dataset), total=len(dataset), desc="features",
                                     disable=not progress):
        n = len(input_ids)
        cache = target.new_cache(n)
        h = target.embed(input_ids.to(target.device))
        prev = 0
        for l in sorted(layers):
            h = target.layers(h, 0, prev, l, cache)
            hidden[l].append(h.float().cpu())
            prev = l
        h = target.layers(h, 0, prev, L, cache)
        ids = torch.full((n, max(topk, 1)), -1, dtype=torch.int32)
        probs = torch.zeros((n, max(topk, 1)))
        sel = loss_mask.nonzero()[:, 0]
        if topk and len(sel):
            p = torch.softmax(target.head(target.norm(h[sel])).float(), -1)
            tp, ti = p.topk(topk, -1)
            ids[sel], probs[sel] = ti.to(torch.int32).cpu(), tp.cpu()
        ids_all.append(ids[:, :topk])
        probs_all.append(probs[:, :topk])
        offsets.append(offsets[-1] + n)
    out = {f"hidden.{l}": torch.cat(v) for l, v in hidden.items()}
    if topk:
        out["topk_ids"], out["topk_probs"] = torch.cat(ids_all), torch.cat(probs_all)
    out["offsets"] = torch.tensor(offsets, dtype=torch.int64)
    return out


def features(target, dataset, meta: dict, data_dir: Path, layer: int, topk: int) -> dict[str, torch.Tensor]:
    """The hidden states entering ``layer`` (``n_layers``: after the last layer, before the final
    norm) as ``hidden``, and the target's top-``topk`` at trained positions (``layer_features``)."""
    f = layer_features(target, dataset, meta, data_dir, (layer,), topk)
    return {"hidden": f[f"hidden.{layer}"], **{k: f[k] for k in ("ids", "probs", "offsets")}}


def layer_features(target, dataset, meta: dict, data_dir: Path, layers: tuple[int, ...],
                   topk: int) -> dict[str, torch.Tensor]:
    """``hidden.{l}``: the hidden states entering each of ``layers`` for every token of the data;
    ``ids``/``probs``: the target's top-``topk`` at trained positions; ``offsets``. Captured during
    generation when they were, else teacher-forced once (all layers in one pass) and cached beside the data."""
    from safetensors.torch import load_file, save_file
    s = meta["settings"]
    if (set(layers) <= set(s["capture_layers"]) and s["topk"] >= topk
            and (data_dir / "features.safetensors").is_file()):
        f = load_features(data_dir)
        return {**{f"hidden.{l}": f[f"hidden.{l}"] for l in layers}, "ids": f["topk_ids"][:, :topk],
                "probs": f["topk_probs"][:, :topk], "offsets": f["offsets"]}
    extra = data_dir / f"features-l{'-'.join(map(str, sorted(layers)))}-k{topk}.safetensors"
    if extra.is_file():
        f = load_file(str(extra))
    else:
        f = compute_features(target, dataset, tuple(layers), topk)
        save_file(f, str(extra))
    return {**{f"hidden.{l}": f[f"hidden.{l}"] for l in layers}, "ids": f["topk_ids"], "probs": f["topk_probs"],
            "offsets": f["offsets"]}


def examples(dataset, indices: list[int] | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(input_ids [n] long, loss_mask [n] bool) for each row (see the loss-mask convention)."""
    rows = range(len(dataset)) if indices is None else indices
    for i in rows:
        row = dataset[int(i)]
        yield (torch.tensor(row["input_ids"], dtype=torch.long), torch.tensor(row["loss_mask"], dtype=torch.bool))


def split(n_rows: int, held_out: float, seed: int = 0, train_limit: int = 0) -> tuple[list[int], list[int]]:
    """A deterministic train / held-out split of row indices (shuffled by ``seed``).

    ``train_limit`` > 0 keeps that many training rows, the first of the same shuffle: smaller
    training sets are nested in larger ones and the held-out rows never change, so a data-scaling
    curve compares every size on one held-out set.
    """
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n_rows, generator=g).tolist()
    n_held = max(1, int(round(n_rows * held_out))) if held_out > 0 and n_rows > 1 else 0
    train = perm[n_held:]
    if train_limit > len(train):
        raise UsageError(f"train_conversations={train_limit} asks for more than the {len(train)} training "
                         f"conversations the data has ({n_rows} minus {n_held} held out); raise conversations")
    return sorted(train[:train_limit] if train_limit else train), sorted(perm[:n_held])


def data_summary(meta: dict, train_rows: list[int], held_rows: list[int]) -> dict:
    """What a trainer's report.json says of its data: the set's size and cost, and the rows it used."""
    return {"conversations": meta["conversations"], "tokens": meta["tokens"], "answer_tokens": meta["answer_tokens"],
            "train_conversations": len(train_rows), "held_out_conversations": len(held_rows),
            "generation_wall_s": meta["wall_time_s"]["total"], "generation_flops": meta["flops"]["total"]}


def split_rows(n_rows: int, options: dict) -> tuple[list[int], list[int]]:
    """The train / held-out rows a trainer's ``RECIPE_OPTIONS`` values ask for."""
    return split(n_rows, options["held_out"], options["seed"], options["train_conversations"])


def token_frequencies(dataset, vocab_size: int) -> torch.Tensor:
    """How often the target wrote each token in its answers (counts over answer tokens)."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for input_ids, loss_mask in examples(dataset):
        answer = input_ids[1:][loss_mask[:-1]]
        counts += torch.bincount(answer, minlength=vocab_size)[:vocab_size]
    return counts
