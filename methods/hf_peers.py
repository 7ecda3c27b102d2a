"""transformers' own self-speculation, run by the harness beside our methods.

* ``hf-assisted-early-exit``: ``generate(assistant_early_exit=l)``, the LayerSkip-style
  self-speculative decoding transformers ships (drafts from the first ``l`` layers through the
  model's LM head, verified by the full model).
* ``hf-prompt-lookup``: ``generate(prompt_lookup_num_tokens=n)``, n-gram drafts copied from the
  prompt.

Both go through ``methods.hf_generate.hf_decoder`` (one ``generate`` wrapper for every peer); they
bypass the engine, and their rounds are counted from the model's own full-depth forwards, so CR
and CTAR compare with ours. Their draft/verify split is not visible, only the round count.
"""

from __future__ import annotations

from specharness.methods.hf_generate import hf_decoder
from specharness.errors import UsageError
from specharness.hookspecs import DecoderSpec, OptionSpec, hookimpl


def _early_exit(target, options: dict):
    l = options["exit_layer"]
    if not 1 <= l <= target.n_layers - 1:
        raise UsageError(f"option hf-assisted-early-exit.exit_layer={l} is outside 1..{target.n_layers - 1} "
                         f"(the target has {target.n_layers} layers)")
    return hf_decoder(target, options, assistant_early_exit=l)


def _prompt_lookup(target, options: dict):
    n = options["num_tokens"]
    if n < 1:
        raise UsageError(f"option hf-prompt-lookup.num_tokens={n} must be at least 1")
    return hf_decoder(target, options, prompt_lookup_num_tokens=n)


@hookimpl
def specharness_decoders() -> list[DecoderSpec]:
    return [
        DecoderSpec("hf-assisted-early-exit", _early_exit,
                    [OptionSpec("exit_layer", "int", 2, "draft from the first exit_layer layers "
                                "(transformers' assistant_early_exit)", min=1)],
                    help="transformers' generate(assistant_early_exit=l): LayerSkip-style self-speculation"),
        DecoderSpec("hf-prompt-lookup", _prompt_lookup,
                    [OptionSpec("num_tokens", "int", 10, "draft tokens per lookup "
                                "(transformers' prompt_lookup_num_tokens)", min=1)],
                    help="transformers' generate(prompt_lookup_num_tokens=n): n-gram drafts from the prompt"),
    ]
