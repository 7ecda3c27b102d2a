"""A software prefetch of the weights in inductor's AMX GEMM micro-kernel (CPU, max-autotune).

Under max-autotune on a CPU with AMX, inductor's C++ GEMM template runs the bfloat16 linears where
it wins autotuning (all of SmolLM2's). Its AMX micro-kernel loads each tile of the packed weights
straight from memory, with no prefetch hint (torch 2.13's template says so in a TODO), so a core
waits for a tile, multiplies it, and only then asks for the next: at one position the loads are
latency-bound, and at 32 positions the multiplies add to the loads instead of hiding under them.
The hint added here asks, at every k-step, for the weight bytes a few k-steps ahead (for 32-column
blocks, 8 KB into L1 in the kernel of up to 16 rows, 16 KB into L2 in the 32-row one). Where a
block's k-range is the whole of K, a thread's packed blocks lie end to end, so near the end of one
block it fetches the start of the next. The distances and cache levels come from a sweep on 30
layers of SmolLM2-shaped linears with their own weights (``amx_prefetch_sweep.txt``), the gain from
the full model, interleaved (``amx_prefetch_ab.txt``), both in ``results/smollm2-cpu-xeon-profile-v3``.

The hint changes no value a kernel computes (``tests/test_compiled.py`` compares the logits of graphs
compiled with and without it, bit for bit). It edits the template's source string once per process,
before graphs compile, and registers a no-op post-grad pass whose ``uuid`` names the edit: inductor's
FX graph cache keys (and AOT autograd's, built on them) include that uuid, so graphs compiled with
and without it never share a cache entry. On a CPU without AMX, or where torch's template text
differs (another torch), nothing changes and ``install`` says False.
``EngineOptions.amx_prefetch`` (``SPECHARNESS_AMX_PREFETCH=0``) switches it off.
"""

from __future__ import annotations

import hashlib

# k-steps (32 elements of K each) ahead, and the cache level, by the kernel's row count: the 16-row
# kernel (up to 16 positions) only streams weights and wants them in L1 soon; the 32-row kernel
# multiplies twice as long per tile and does best asking for them in L2 further ahead
# (amx_prefetch_sweep.txt: one position 4 k-steps to L1, 32 positions 8 k-steps to L2)
NARROW, WIDE = ("4", "_MM_HINT_T0"), ("8", "_MM_HINT_T1")
_UUID = "specharness-amx-prefetch"
_ANCHOR = "    auto compute = [&](int k) {\n"
_HINT = (
    "    auto compute = [&](int k) {\n"
    "        {   // specharness: prefetch the weight tiles some k-steps ahead (specharness/amx_prefetch.py)\n"
    "            const char* pf_base = reinterpret_cast<const char*>(\n"
    "                B + (k + {{ '%s' if num_rows > 16 else '%s' }} * {{block_k}}) * ldb);\n"
    "            const int64_t pf_bytes = {{block_k}} * ldb * sizeof(B[0]);\n"
    "            for (int64_t pf_off = 0; pf_off < pf_bytes; pf_off += 64) {\n"
    "                _mm_prefetch(pf_base + pf_off, {{ '%s' if num_rows > 16 else '%s' }});\n"
    "            }\n"
    "        }\n"
) % (WIDE[0], NARROW[0], WIDE[1], NARROW[1])

_installed: bool | None = None


def patched(template: str) -> str | None:
    """The AMX micro-kernel's template with the prefetch in its k-loop; None when the loop is not
    found exactly once (a torch whose template differs). Editing twice changes nothing."""
    if _HINT in template:
        return template  # already edited (a test that reset this module's state)
    if template.count(_ANCHOR) != 1:
        return None
    return template.replace(_ANCHOR, _HINT)


def install(enabled: bool = True) -> bool:
    """Edit the template once per process; True when compiled AMX GEMMs prefetch (``enabled``:
    ``EngineOptions.amx_prefetch``)."""
    global _installed
    if not enabled:  # the edit is process-wide: a target made after it with prefetch off still compiles with it
        return bool(_installed)
    if _installed is not None:
        return _installed
    _installed = False
    try:
        import torch
        if not torch.cpu._is_amx_tile_supported():
            return False  # no AMX kernel to edit runs here
        import torch._inductor.graph  # noqa: F401  (imports inductor's codegen modules in their order)
        import torch._inductor.config as inductor_config
        from torch._inductor.codegen import cpp_micro_gemm
        from torch._inductor.custom_graph_pass import CustomGraphPass
        amx = cpp_micro_gemm.CppMicroGemmAMX
    except (ImportError, AttributeError):
        return False
    template, slot = getattr(amx, "TEMPLATE_KERNEL", ""), inductor_config.post_grad_custom_post_pass
    if _HINT in template and str(getattr(slot, "uuid", lambda: "")()).startswith(_UUID):
        _installed = True  # edited and marked already (this module's state was reset)
        return True
    new = patched(template)
    if new is None or slot is not None:
        return False  # another torch's template, or someone else's pass in the one slot we would use
    digest = hashlib.sha256(new.encode()).hexdigest()[:16]

    class PrefetchMarker(CustomGraphPass):
        """Changes no graph; its uuid puts the edited template into inductor's cache keys."""

        def __call__(self, graph) -> None:
            return None

        def uuid(self) -> str:
            return f"{_UUID}-{digest}"

    amx.TEMPLATE_KERNEL = new
    inductor_config.post_grad_custom_post_pass = PrefetchMarker()
    _installed = True
    return True
