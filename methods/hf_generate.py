"""transformers' ``generate()`` on the same prompts: the baseline users already have.

It bypasses the engine on purpose (it is what we compare the engine against). Its rounds are
read off the model itself: a forward hook on the last decoder layer sees every full-depth target
forward (drafts from an early exit never reach it), and the start position and width of each call
give how many tokens that forward drafted and committed, so CR and CTAR of transformers' own
speculative decoders are counted like ours. Round timings are the wall time spread evenly.
"""

from __future__ import annotations

import torch

from specharness.hookspecs import DecoderSpec, hookimpl
from specharness.records import Generation, Round
from specharness.timing import clock_for


def rounds_from_forwards(calls: list[tuple[int, int]], prompt_len: int, n_new: int) -> list[tuple[int, int]]:
    """(drafted, accepted) per full-depth forward from each call's (start position, width).

    After call i the cache holds positions < start of call i+1, so the tokens generated so far are
    start_{i+1} - prompt_len + 1 (the newest token is not yet in the cache); the difference between
    successive counts is what call i committed (its accepted drafts + one bonus token). The first
    call may carry drafts after the prompt (transformers verifies candidates in the prefill).
    """
    if not calls:
        return []
    done = [s - prompt_len + 1 for s, _ in calls[1:]] + [n_new]
    out, before = [], 0
    for i, ((start, width), total) in enumerate(zip(calls, done)):
        drafted = width - (prompt_len - start) if i == 0 else width - 1
        out.append((max(drafted, 0), max(total - before - 1, 0)))
        before = total
    return out


def hf_decoder(target, options: dict, **generate_kwargs):
    """A ``generate(prompt_ids, max_new_tokens, temperature, seed)`` over ``target.hf``."""
    hf = target.hf
    eos = sorted(target.eos_ids) or None
    perf_counter = clock_for(target.device)
    last_layer = hf.model.layers[-1]

    @torch.inference_mode()
    def generate(prompt_ids: list[int], max_new_tokens: int, temperature: float, seed: int) -> Generation:
        ids = torch.tensor([prompt_ids], device=target.device)
        sampling = temperature > 0
        kwargs = dict(do_sample=sampling, max_new_tokens=max_new_tokens, eos_token_id=eos,
                      pad_token_id=eos[0] if eos else None, top_k=0 if sampling else None,
                      top_p=1.0 if sampling else None, temperature=temperature if sampling else None)
        if sampling:
            torch.manual_seed(seed)
        calls: list[tuple[int, int]] = []

        def count(_module, args, kwargs, _out):
            h = args[0] if args else kwargs["hidden_states"]
            pos = kwargs.get("position_ids")
            calls.append((int(pos[0, 0]) if pos is not None else 0, h.shape[1]))

        hook = last_layer.register_forward_hook(count, with_kwargs=True)
        try:
            started = perf_counter()
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), **kwargs, **generate_kwargs)
            wall = perf_counter() - started
        finally:
            hook.remove()
        new = out[0, len(prompt_ids):].tolist()
        stop = "eos" if new and new[-1] in target.eos_ids else "length"
        counted = rounds_from_forwards(calls, len(prompt_ids), len(new))
        per = wall / max(len(counted), 1)
        return Generation(new, [Round(d, a, 0.0, per, 0.0, width=w) for (d, a), (_, w) in zip(counted, calls)],
                          wall, stop)

    return generate


@hookimpl
def specharness_decoders() -> list[DecoderSpec]:
    return [DecoderSpec("hf-generate", hf_decoder,
                        help="transformers' generate() on the same prompts (the baseline users have)")]
