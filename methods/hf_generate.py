"""transformers' ``generate()`` on the same prompts: the baseline users already have.

It bypasses the engine on purpose (it is what we compare the engine against); each generated
token is recorded as one round so CR and accept lengths read as for vanilla.
"""

from __future__ import annotations

import torch

from specharness.hookspecs import DecoderSpec, hookimpl
from specharness.records import Generation, Round
from specharness.timing import clock_for


def hf_decoder(target, options: dict, **generate_kwargs):
    """A ``generate(prompt_ids, max_new_tokens, temperature, seed)`` over ``target.hf``."""
    hf = target.hf
    eos = sorted(target.eos_ids) or None
    perf_counter = clock_for(target.device)

    @torch.inference_mode()
    def generate(prompt_ids: list[int], max_new_tokens: int, temperature: float, seed: int) -> Generation:
        ids = torch.tensor([prompt_ids], device=target.device)
        sampling = temperature > 0
        kwargs = dict(do_sample=sampling, max_new_tokens=max_new_tokens, eos_token_id=eos,
                      pad_token_id=eos[0] if eos else None, top_k=0 if sampling else None,
                      top_p=1.0 if sampling else None, temperature=temperature if sampling else None)
        if sampling:
            torch.manual_seed(seed)
        started = perf_counter()
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), **kwargs, **generate_kwargs)
        wall = perf_counter() - started
        new = out[0, len(prompt_ids):].tolist()
        stop = "eos" if new and new[-1] in target.eos_ids else "length"
        per = wall / max(len(new), 1)
        return Generation(new, [Round(0, 0, 0.0, per, 0.0) for _ in new], wall, stop)

    return generate


@hookimpl
def specharness_decoders() -> list[DecoderSpec]:
    return [DecoderSpec("hf-generate", hf_decoder,
                        help="transformers' generate() on the same prompts (the baseline users have)")]
