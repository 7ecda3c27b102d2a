"""Kangaroo: double early exiting self-speculative decoding (Liu et al., arXiv:2404.18911).

Draft model = the target's layers [0, l) (frozen, writing the target's own KV cache) -> adapter
(RMSNorm -> one attention block with the target's head layout, rotary embedding and its own 1-layer
KV cache, residual -> RMSNorm) -> the target's shared LM head (optionally only the rows of the
``draft_vocab`` most frequent tokens of the self-distillation data: a cheaper draft step, still
lossless because verification is exact and speculative sampling is exact for any draft q).

A round, with ``pos`` the position of the current token (chosen by the target, not yet run):

    h_cur = layers[0, l)(current)                                  (shared cache, position pos)
    adapter(pending + h_cur) -> head -> d1, conf1                   (adapter cache)
    h_1 = layers[0, l)(d1); stop if conf1 <= eta or gamma reached; else adapter(h_1) -> d2 ...
    Proposal(tokens d1..dk, hidden = [h_cur, h_1..h_k], layer = l)  -> engine verifies [l, L)

so the shallow layers never run twice for a token, and verification starts at layer l. The last
draft d_k never passes through the adapter in its round; when it is accepted its saved layer-l
state is fed to the adapter at the start of the next round (``pending``), as the authors do,
instead of redoing a shallow pass. ``commit`` crops the adapter cache to the accepted length.

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
from specharness.model import TargetModel, read_bytes, stack_name
from specharness.training import checkpoint_summary

from .adapter import Adapter
from .checkpoint import load_adapter, shipped_adapter_dir

OPTIONS = [
    OptionSpec("exit_layer", "int", 2, "early-exit layer l: layers [0, l) draft, [l, L) verify (1..L-1)", min=1),
    OptionSpec("eta", "float", 0.6, "stop drafting after a token whose top-1 draft probability is <= eta",
               min=0.0, max=1.0),
    OptionSpec("gamma", "int", 6, "most draft tokens per round", min=1),
    OptionSpec("adapter", "str", "", "adapter checkpoint directory; empty = the shipped adapter for this "
               "model and exit layer; 'random' or 'random:SEED' = a freshly initialised one"),
    OptionSpec("draft_vocab", "int", -1, "draft head rows: 0 = full LM head, N = the N most frequent tokens "
               "of the adapter's training data, -1 = what the adapter was trained with", min=-1),
]


class KangarooDrafter:
    """The Drafter interface (see specharness.engine): built once per method, per-sequence state reset in ``begin``."""

    def __init__(self, target: TargetModel, adapter: Adapter, exit_layer: int, eta: float, gamma: int,
                 rows: torch.Tensor | None = None, stack: str = "") -> None:
        self.t = target
        self.adapter = adapter
        self.exit_layer = exit_layer
        self.eta = eta
        self.gamma = gamma
        self.max_width = gamma + 1  # the widest verification forward (compiled before timing)
        self.rows = rows  # draft head rows (token ids), None = full head
        if adapter.own_head_rows:
            head = adapter.lm_head.weight.detach()
        else:
            head = target.head_rows(rows) if rows is not None else target.head_weight
        # adapter -> norm -> head rows run as a stack of the target's layout, through its backend (compiled
        # with the target's dtype and mode, in warm-up): the draft step is not eager Python
        self.stack = target.add_stack(stack or stack_name("kangaroo", None), [adapter.layer_weights()],
                                      adapter.norm.weight.detach(), head,
                                      max_width=2)  # a round's adapter rows: the last accepted draft + the current
        self.skip = ((), ()) if adapter.ffn else ((), (0,))  # the published adapter has no feed-forward block
        # a draft token: the shallow layers' pass, then the adapter block, its norm and the head rows
        self.draft_bytes = (read_bytes(target.layers_w[:exit_layer])
                            + target.backend.stacks[self.stack].read_bytes(self.skip))
        self.cache = None
        self.pending: torch.Tensor | None = None  # layer-l states not yet in the adapter cache
        self.stats = {"rounds": 0, "drafted": 0, "adapter_rows": 0}

    # the adapter's own cache: its length is the first position whose state it has not seen
    @property
    def adapter_len(self) -> int:
        return self.cache.lengths[0]

    def begin(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        self.cache = self.t.new_cache(state.cache.max_len, n_layers=1)
        self.pending = None
        if prefill_hidden is not None and prefill_hidden.shape[0]:  # the prompt's adapter KV
            self.t.forward(prefill_hidden, self.cache, 0, stack=self.stack, skip=self.skip, prefill=True)

    def _draft_logits(self, x: torch.Tensor, start: int) -> torch.Tensor:
        self.stats["adapter_rows"] += x.shape[0]
        return self.t.forward(x, self.cache, start, stack=self.stack, skip=self.skip, head=True).logits[-1].float()

    def keep_drafting(self, state: DecodeState, i: int, token: int, confidence: float) -> bool:
        """The first early exit: go on after draft ``i`` only while it was confident (> eta).
        The oracle stop (methods/oracle.py) overrides this with the target's own answer."""
        return confidence > self.eta

    def propose(self, state: DecodeState) -> Proposal:
        t, l, pos = self.t, self.exit_layer, state.pos
        h_cur = t.layers(torch.tensor([state.ids[-1]], device=t.device), pos, 0, l, state.cache)
        budget = min(self.gamma, state.max_draft, state.budget)
        first = self.adapter_len
        x = h_cur if self.pending is None else torch.cat([self.pending, h_cur])
        self._states = x  # layer-l states of positions first .. pos (+ drafts below)
        self._first = first
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        hs = [h_cur]
        start = first
        sampling = state.temperature > 0
        for i in range(budget):
            d = draft_vocab.draw(self._draft_logits(x, start), self.rows, t.vocab_size, state.temperature,
                                 state.generator)
            tok, conf = d.token, d.confidence
            if d.q is not None:
                qs.append(d.q)
            tokens.append(tok)
            h = t.layers(torch.tensor([tok], device=t.device), pos + 1 + i, 0, l, state.cache)
            hs.append(h)
            if i + 1 == budget or not self.keep_drafting(state, i, tok, conf):
                break
            x, start = h, pos + 1 + i
        hidden = torch.cat(hs)
        self._states = torch.cat([self._states, hidden[1:]]) if len(hs) > 1 else self._states
        self.pending = None
        self.stats["rounds"] += 1
        self.stats["drafted"] += len(tokens)
        return Proposal(tokens, torch.stack(qs) if sampling and qs else None, hidden, l)

    def commit(self, state: DecodeState, accepted: int) -> None:
        keep = state.pos  # the new current token's position: positions < keep are final
        self.cache.crop(keep)
        have = self.adapter_len
        if have < keep:  # accepted positions the adapter has not seen (the last draft, or no drafts)
            self.pending = self._states[have - self._first:keep - self._first]
        else:
            self.pending = None


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
                       None if rows is None else rows.numel())
    return (drafter_class or KangarooDrafter)(target, adapter, l, opts["eta"], opts["gamma"], rows, stack)


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
