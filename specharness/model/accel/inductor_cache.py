"""Inductor's on-disk FX graph cache for frozen graphs: keyed by the weights' values, and allowed
for graphs holding oneDNN-prepacked weights.

With freezing on CPU, inductor constant-folds the weights and prepacks linears for oneDNN (bfloat16
and float16 always, float32 in dynamic-width graphs). The packed weights are mkldnn tensors, and
torch 2.13 refuses to put any graph holding one in its FX graph cache ("mkldnn tensors
unpickleable"), so every run lowered and compiled its graphs again: 197 s of a second run's warm-up
for vanilla's three graphs alone (``results/smollm2-cpu-warmup``).

Torch keys a frozen weight by its shape and dtype only, and on a cache hit binds the compiled code
to the weights of the graph being compiled, by name. That is not enough under max-autotune: where
its C++ GEMM template wins, the template re-blocks the weight into a new constant that the cache
entry stores by value (about 270 MB per SmolLM2 graph), so a model of the same shapes with other
weights, or another layer range of the same length, would hit and run the first model's weights.
So this module keys every frozen weight by a digest of its values (packed ones through their dense
form): a hit needs the very same weights, whatever the entry holds. Hashing SmolLM2's weights
costs about 0.3 s per graph, against a minute of compiling.

``tests/test_compiled.py`` checks it in three processes on one cache, under max-autotune with the
C++ template forced: a model of the same shapes with other weights gets its own logits, a second
process hits and gets the first's logits bit for bit, and with the hook off the graphs bypass.

It replaces two private functions of ``torch._inductor.codecache``. Where they are missing (another
torch), nothing changes and graphs with packed weights are simply not cached.
``EngineOptions.cache_prepacked`` (``SPECHARNESS_CACHE_PREPACKED=0``) switches it off.
"""

from __future__ import annotations

import hashlib

import torch

_installed = False


def weights_digest(t: torch.Tensor) -> str:
    """A digest of a CPU tensor's values (mkldnn ones through their dense form). Not memoised: a
    weight changed in place must not keep its old digest."""
    dense = (t.to_dense() if t.is_mkldnn else t).detach().contiguous().reshape(-1)
    return hashlib.blake2b(dense.view(torch.uint8).numpy(), digest_size=16).hexdigest()


def cache_prepacked_graphs(enabled: bool = True) -> bool:
    """Install the two hooks once per process; True when frozen graphs are cached by value
    (``enabled``: ``EngineOptions.cache_prepacked``)."""
    global _installed
    if _installed:
        return True
    if not enabled:
        return False
    try:
        from torch._inductor import codecache
        from torch._inductor.freezing_utils import is_frozen_param
        validator, pickler = codecache.CacheabilityValidator, codecache.FxGraphCachePickler
        check_tensor, reduce_tensor, ident = validator.check_tensor, pickler._reduce_tensor, codecache._ident
    except (ImportError, AttributeError):
        return False

    def check(t) -> None:
        if not (t.is_mkldnn and is_frozen_param(t)):
            check_tensor(t)

    def reduce(self, t):
        if is_frozen_param(t) and t.device.type == "cpu":
            return ident, (("frozen-param", tuple(t.shape), str(t.dtype), t.is_mkldnn, weights_digest(t)),)
        return reduce_tensor(self, t)

    validator.check_tensor = staticmethod(check)
    pickler._reduce_tensor = reduce
    _installed = True
    return True
