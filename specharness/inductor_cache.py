"""Let inductor's on-disk FX graph cache keep graphs whose frozen weights are oneDNN-prepacked.

With freezing on CPU, inductor constant-folds the weights and prepacks bfloat16 linears for oneDNN.
The packed weights are mkldnn tensors, and torch (2.5 to 2.14 at least) refuses to put any graph
holding one in its FX graph cache ("mkldnn tensors unpickleable"), so every run lowered and
compiled its graphs again: 197 s of a second run's warm-up for vanilla alone
(``results/smollm2-cpu-warmup``).

Nothing needs pickling. Inductor keys every other frozen parameter by its metadata only and, on a
cache hit, binds the compiled code to the tensors of the graph being compiled *in this process*, by
name (``CompiledFxGraphConstantsWithGm``). The packed weights are frozen parameters of that kind:
constant folding makes them, in this process, from this model's weights. So this module hashes a
frozen mkldnn tensor by its shape and dtype as well, and lets the cache take the graph; what runs
is still this process's own packed weights. ``tests/test_compiled.py`` checks it in two processes:
the second hits the cache, gives bit-identical logits, and a model of the same shape with other
weights gets its own logits from the cached graph.

It touches two private functions of ``torch._inductor.codecache``. Where they are missing (another
torch), nothing changes and graphs are simply not cached. ``SPECHARNESS_CACHE_PREPACKED=0``
switches it off.
"""

from __future__ import annotations

import os

_installed = False


def cache_prepacked_graphs() -> bool:
    """Install the two hooks once per process; True when graphs with packed weights can be cached."""
    global _installed
    if _installed:
        return True
    if os.environ.get("SPECHARNESS_CACHE_PREPACKED", "1") == "0":
        return False
    try:
        from torch._inductor import codecache
        from torch._inductor.freezing_utils import is_frozen_param
        validator, pickler = codecache.CacheabilityValidator, codecache.FxGraphCachePickler
        check_tensor, reduce_tensor, ident = validator.check_tensor, pickler._reduce_tensor, codecache._ident
    except (ImportError, AttributeError):
        return False

    def packed(t) -> bool:
        return t.is_mkldnn and is_frozen_param(t)

    def check(t) -> None:
        if not packed(t):
            check_tensor(t)

    def reduce(self, t):
        if packed(t):  # keyed like every other frozen parameter: by metadata, bound by name on a hit
            return ident, (("mkldnn-frozen-param", tuple(t.shape), str(t.dtype)),)
        return reduce_tensor(self, t)

    validator.check_tensor = staticmethod(check)
    pickler._reduce_tensor = reduce
    _installed = True
    return True
