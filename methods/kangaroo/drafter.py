"""Kangaroo: double early exiting self-speculative decoding (Liu et al., arXiv:2404.18911).

Draft model = the target's layers [0, l) (frozen, the target's own tensors) -> adapter (RMSNorm ->
one attention block with the target's head layout and rotary embedding, residual -> RMSNorm) -> the
target's shared LM head (optionally only the rows of the
``draft_vocab`` most frequent tokens of the self-distillation data: a cheaper draft step, still
lossless because verification is exact and speculative sampling is exact for any draft q).

A draft step is one compiled graph: the target's layers [0, l) (the target's own tensors and layer
code) and the adapter block, its norm and head rows run as one stack (``TargetModel.add_stack``)
over the drafter's own cache of l + 1 layers: the shallow layers' K/V, then the adapter's. Only the
drafter runs layers [0, l) after the prompt (verification starts at layer l), so their K/V live
in its cache, copied from the engine's prefill once per prompt. A round, with ``pos`` the position
of the current token (chosen by the target, not yet run):

    step(current)  -> h_cur (layer-l state, captured), draft logits -> d1, conf1
    step(d1)       -> h_1, logits -> d2, conf2      (while conf > eta and gamma not reached)
    ...
    step(dk)       -> h_k                           (its logits unused)
    Proposal(tokens d1..dk, hidden = [h_cur, h_1..h_k], layer = l)  -> engine verifies [l, L)

so the shallow layers never run twice for a token, and verification starts at layer l. The last
draft passes the adapter too (its logits unused): the adapter then has seen every position the
round ran, so the next round needs no catch-up pass, and a round makes k + 1 graph calls, not
2k + 1 (``results/smollm2-cpu-epyc-leaderboard``'s profile: 1.75x the byte roofline per draft
token as two calls a token). ``commit`` crops the drafter's cache to the accepted length.

Confidence (the early-exit test) is the top-1 probability of the draft distribution the token was
taken from: softmax of the draft logits at temperature 1 for greedy decoding, at the decoding
temperature when sampling (the token's own q). The draft token is still proposed when it fails.

The adapter is in ``adapter.py``, its checkpoints in ``checkpoint.py``, training in ``train.py`` and
the hook implementations in ``plugin.py``; imports run one way: plugin -> drafter, train ->
checkpoint -> adapter.
"""

from __future__ import annotations

from pathlib import Path

import torch

from specharness import draft_vocab
from specharness.api import DecodeState, Proposal
from specharness.errors import UsageError
from specharness.options import OptionSpec, resolve_options
from specharness.model import TargetModel, stack_name
from specharness.training import checkpoint_summary

from .adapter import Adapter
from .checkpoint import load_adapter, shipped_adapter_dir

OPTIONS = [
    OptionSpec("exit_layer", "int", 2, "early-exit layer l: layers [0, l) draft, [l, L) verify (1..L-1)", min=1),
    OptionSpec("eta", "float", 0.6, "stop drafting after a token whose top-1 draft probability is <= eta",
               min=0.0, max=1.0),
    # 3, not the paper's 6: the shipped adapter drafts 4+ tokens in < 1% of rounds at eta 0.6, and a cap of 3
    # ran at 1.007x of 6's speed (p 0.38) with one verification graph fewer (results/smollm2-cpu-epyc-kangaroo-gamma)
    OptionSpec("gamma", "int", 3, "most draft tokens per round", min=1),
    # not the paper's (it always proposes the first draft): a round whose first draft is this unsure verifies the
    # current token alone, a narrower forward, where such drafts are rarely kept and wide verification is dear
    OptionSpec("first_eta", "float", 0.0, "propose no draft in a round whose first draft's top-1 draft probability "
               "is <= first_eta (0: always propose it, as the paper)", min=0.0, max=1.0),
    OptionSpec("adapter", "str", "", "adapter checkpoint directory; empty = the shipped adapter for this "
               "model and exit layer; 'random' or 'random:SEED' = a freshly initialised one"),
    OptionSpec("draft_vocab", "int", -1, "draft head rows: 0 = full LM head, N = the N most frequent tokens "
               "of the adapter's training data, -1 = what the adapter was trained with", min=-1),
]


class KangarooDrafter:
    """The Drafter interface (see specharness.engine): built once per method, per-sequence state reset in ``begin``."""

    def __init__(self, target: TargetModel, adapter: Adapter, exit_layer: int, eta: float, gamma: int,
                 rows: torch.Tensor | None = None, stack: str = "", first_eta: float = 0.0) -> None:
        self.t = target
        self.adapter = adapter
        self.exit_layer = exit_layer
        self.eta = eta
        self.first_eta = first_eta
        self.gamma = gamma
        self.max_width = gamma + 1  # the widest verification forward (compiled before timing)
        self.rows = rows  # draft head rows (token ids), None = full head
        if adapter.own_head_rows:
            head = adapter.lm_head.weight.detach()
        else:
            head = target.head_rows(rows) if rows is not None else target.head_weight
        # shallow layers -> adapter -> norm -> head rows as one stack of the target's layout, through its
        # backend (compiled with the target's dtype and mode, in warm-up): a draft token is one graph call
        self.stack = target.add_stack(stack or stack_name("kangaroo", None),
                                      [*target.layers_w[:exit_layer], adapter.layer_weights()],
                                      adapter.norm.weight.detach(), head)
        self.skip = ((), ()) if adapter.ffn else ((), (exit_layer,))  # the published adapter has no feed-forward block
        self.draft_bytes = target.backend.stacks[self.stack].read_bytes(self.skip)  # what one draft step reads
        self.cache = None  # layers [0, l) (the shallow layers' K/V) and l (the adapter's)

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        t, l, n = self.t, self.exit_layer, state.prompt_len
        self.cache = t.new_cache(state.cache.max_len, n_layers=l + 1)
        for mine, engine in ((self.cache.keys, state.cache.keys), (self.cache.values, state.cache.values)):
            mine[:l, :, :n] = engine[:l, :, :n]  # the prompt's shallow K/V, from the engine's prefill
        self.cache.lengths[:l] = [n] * l
        if prefill_hidden is not None and prefill_hidden.shape[0]:  # the prompt's adapter K/V
            t.forward(prefill_hidden, self.cache, 0, l, l + 1, stack=self.stack, skip=self.skip, prefill=True)

    def _step(self, token: int, pos: int):
        """One draft step at ``pos``: the token through the shallow layers (its layer-l state captured)
        and the adapter, to the draft logits for position pos + 1."""
        t, l = self.t, self.exit_layer
        return t.forward(torch.tensor([token], device=t.device), self.cache, pos, 0, l + 1, head=True,
                         capture=(l - 1,), skip=self.skip, stack=self.stack)

    def keep_drafting(self, state: DecodeState, i: int, token: int, confidence: float) -> bool:
        """The first early exit: go on after draft ``i`` only while it was confident (> eta).
        The oracle stop (methods/oracle/drafter.py) overrides this with the target's own answer."""
        return confidence > self.eta

    def propose(self, state: DecodeState) -> Proposal:
        t, l, pos = self.t, self.exit_layer, state.pos
        budget = min(self.gamma, state.max_draft, state.budget)
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        out = self._step(state.ids[-1], pos)
        hs = [out.captured[l - 1]]
        while len(tokens) < budget:
            d = draft_vocab.draw(out.logits[-1], self.rows, t.vocab_size, state.temperature, state.generator)
            if not tokens and d.confidence <= self.first_eta:
                break  # lossless: the choice reads the draft distribution only, and an empty round is plain decoding
            if d.q is not None:
                qs.append(d.q)
            tokens.append(d.token)
            out = self._step(d.token, pos + len(tokens))
            hs.append(out.captured[l - 1])
            if not self.keep_drafting(state, len(tokens) - 1, d.token, d.confidence):
                break
        return Proposal(tokens, torch.stack(qs) if qs else None, torch.cat(hs), l)

    def commit(self, state: DecodeState, accepted: int) -> None:
        self.cache.crop(state.pos)  # the new current token's position: every position before it is final


# ---- building from options ---------------------------------------------------------------------------
def _adapter_dir(target: TargetModel, opts: dict) -> Path | None:
    """The checkpoint directory ``-o adapter`` names (the shipped one when empty; None for random)."""
    ref = (opts["adapter"] or "").strip()
    if ref.startswith("random"):
        return None
    return Path(ref) if ref else shipped_adapter_dir(target, opts["exit_layer"])


def _resolve_adapter(target: TargetModel, opts: dict) -> tuple[Adapter, torch.Tensor | None, dict]:
    l = opts["exit_layer"]
    ref = (opts["adapter"] or "").strip()
    path = _adapter_dir(target, opts)
    if path is None:  # random or random:SEED
        seed = 0
        if ref != "random":
            try:
                seed = int(ref.split(":", 1)[1])
            except (IndexError, ValueError):
                raise UsageError(f"option kangaroo.adapter='{ref}': write 'random' or 'random:SEED'") from None
        return Adapter.for_target(target, seed=seed).eval(), None, {"source": f"random (seed {seed})"}
    if not ref and not path.is_dir():
        raise UsageError(f"no shipped Kangaroo adapter for '{target.name}' at exit_layer {l}; train one with "
                         f"'python -m specharness train kangaroo -o exit_layer={l} --out DIR' and pass "
                         "-o adapter=DIR (or -o adapter=random for an untrained one)")
    key = ("kangaroo-adapter", str(path.resolve()), path.stat().st_mtime_ns if path.exists() else None, l)
    if key not in target.memo:  # loaded once per target: build, params and info all ask for it
        target.memo[key] = load_adapter(path, target, l)
    return target.memo[key]


def _draft_rows(target: TargetModel, opts: dict, vocab: torch.Tensor | None, cfg: dict,
                own_head_rows: int = 0) -> torch.Tensor | None:
    n = opts["draft_vocab"]
    if own_head_rows:  # the adapter's own head fixes the draft vocabulary
        if n not in (-1, own_head_rows) and not (n == 0 and own_head_rows == target.vocab_size):
            raise UsageError(f"option kangaroo.draft_vocab={n}: this adapter has its own LM head over "
                             f"{own_head_rows} tokens; leave draft_vocab at -1")
        return None if own_head_rows == target.vocab_size else vocab[:own_head_rows].contiguous()
    trained = int((cfg.get("specharness") or {}).get("draft_vocab") or 0)
    return draft_vocab.select(vocab, n, trained, target.vocab_size, "kangaroo", "it needs an adapter that stores "
                              "its token frequencies (ours do; this one does not); use draft_vocab=0")


def build(target: TargetModel, options: dict, drafter_class: type = None) -> KangarooDrafter:
    """A drafter for these options; ``drafter_class`` lets a variant (the oracle stop) reuse it all."""
    opts = resolve_options("kangaroo", OPTIONS, options)
    l = opts["exit_layer"]
    if not 1 <= l < target.n_layers:
        raise UsageError(f"option kangaroo.exit_layer={l} is outside [1, {target.n_layers - 1}] for "
                         f"'{target.name}' ({target.n_layers} layers)")
    adapter, vocab, cfg = _resolve_adapter(target, opts)
    rows = _draft_rows(target, opts, vocab, cfg, adapter.own_head_rows)
    stack = stack_name("kangaroo", _adapter_dir(target, opts) or opts["adapter"], l,
                       None if rows is None else rows.numel(), "shallow layers + adapter")
    return (drafter_class or KangarooDrafter)(target, adapter, l, opts["eta"], opts["gamma"], rows, stack,
                                              opts["first_eta"])


def extra_params(target: TargetModel, options: dict) -> int:
    opts = resolve_options("kangaroo", OPTIONS, options)
    adapter, _, _ = _resolve_adapter(target, opts)
    return adapter.n_parameters


def adapter_info(target: TargetModel, options: dict) -> dict:
    """The adapter's layout for Table 2 (feed-forward block or not, shared or own LM head) and, from
    its report.json, what it was trained on (for the data-scaling figure)."""
    opts = resolve_options("kangaroo", OPTIONS, options)
    adapter, _, _ = _resolve_adapter(target, opts)
    path = _adapter_dir(target, opts)
    trained = checkpoint_summary(path) if path else {}
    return {"ffn": adapter.ffn, "lm_head": f"own ({adapter.own_head_rows} rows)" if adapter.own_head_rows else "shared",
            **({"training": trained} if trained else {})}
