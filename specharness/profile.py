"""python -m specharness profile: what the engine costs on the model and machine at hand.

Measured in one run, after warm-up and compilation (never timed):

- the memory read bandwidth (GB/s, summing a float32 tensor far larger than the caches) and the
  roofline it implies: bytes of weights one decoding step must read / bandwidth, per dtype;
- the target forward in ms by width (1..8, 16, 32, 64 positions, timed in turns) at two context lengths, and a
  prefill's cost by prompt length, for every engine configuration (dtype x eager / compiled);
- transformers' ``generate`` step (ms per token) in each dtype: the baseline users have; and the
  transformers model's own forward by width and prefill by length, eager, which transformers'
  speculative peers (``hf-prompt-lookup``, ``hf-assisted-early-exit``) verify with;
- one draft step of each installed drafter (its ``propose`` time per round, fitted as fixed +
  per drafted token through the median of each drafted count, over rounds at each size a budget can
  pick), and the engine's own per-round cost, in the configuration runs will use;
- each of transformers' speculative peers: its time per drafted token, the part of a generation
  on the profile's prompt that the transformers forwards above and ``generate``'s per-step
  overhead do not explain (transformers does not expose its draft/verify split).

It writes profile.json, profile.md and profile.png (ms against width, rooflines drawn), and
records the configuration with the fastest vanilla step as this machine's default
(``specharness.model.engine_choice``). ``report --profile profile.json`` predicts each result file's speedup
from this profile and the file's own acceptance, beside the measured one.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from .model import engine_choice
from .errors import UsageError
from .model.engine_choice import median_ms, random_ids
from .budget import sizes_for
from .metrics import fit_line
from .paths import write_text_atomic
from .plugins import build_registry
from .results import provenance
from .report.figures import style
from .runner import Settings, build_method
from .timing import clock_for
from .stats import median_ci
from .model import WIDTH_BUCKETS, read_bytes
from .session import EngineRequest, Session

WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
CONTEXTS = (256, 1024)
PREFILLS = (64, 256, 512)
PROFILE_PROMPT = "Explain in a few sentences why the sky is blue."
COPY_PROMPT = ("Repeat this list exactly, twice, one item per line: apples, pears, plums, figs, dates, limes, "
               "kiwis, grapes, melons, cherries.")  # n-gram drafters draft much here, little on the first


def bandwidth_gbs(mb: int = 540, repeats: int = 7, device: str = "cpu") -> float:
    """Read bandwidth: GB/s of summing a float32 tensor of ``mb`` MB (median of repeats). On CUDA
    the weights live in device memory, so the roofline needs the device's bandwidth instead
    (``device_bandwidth_gbs``), not the host's."""
    if torch.device(device).type == "cuda":
        return device_bandwidth_gbs(device)
    x = torch.ones(mb * 1024 * 1024 // 4)
    return x.numel() * 4 / (median_ms(x.sum, repeats) / 1e3) / 1e9


def device_bandwidth_gbs(device: str = "cuda", mb: int = 1024, repeats: int = 10) -> float:
    """Device memory (HBM) bandwidth: GB/s of a device-to-device copy of ``mb`` MiB, bytes read plus
    bytes written, timed with CUDA events (median of repeats after warm-up). A buffer many times the
    L2 cache, so the copy streams from memory."""
    src = torch.ones(mb * 1024 * 1024 // 4, device=device)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), repeats, warm=3, sync=True)
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e9


def bandwidth_method(device: str) -> str:
    """How ``bandwidth_gbs`` measured on ``device`` (profile headers say it)."""
    if torch.device(device).type == "cuda":
        return "device-to-device copy of 1024 MiB, bytes read + written, CUDA events"
    return "sum of a 540 MB float32 tensor in host memory"


def weight_bytes(target) -> int:
    """Bytes one decoding step reads: every matmul's weight, the LM head's included, and the norms
    (the embedding lookup reads one row; a tied head is counted once, as the matmul that reads it)."""
    return read_bytes(target.layers_w, target.norm_weight, target.head_weight)


def _linear_shapes(target) -> list[tuple[int, int, int]]:
    """(out, in, count) of every matmul one position goes through: the layers' and the LM head."""
    shapes: dict[tuple[int, int], int] = {}
    for w in target.layers_w:
        for m in (w.attn.wqkv, w.attn.wo, w.w_gate_up, w.w_down):
            shapes[tuple(m.shape)] = shapes.get(tuple(m.shape), 0) + 1
    head = tuple(target.head_weight.shape)
    shapes[head] = shapes.get(head, 0) + 1
    return [(o, i, n) for (o, i), n in shapes.items()]


def _hot_linear_ms(x: torch.Tensor, out: int, budget: int = 1 << 20) -> float:
    """ms of ``linear(x, W)`` for a weight of ``out`` rows, timed on as many rows as fit ``budget``
    bytes (cache-resident, so no memory traffic) and scaled to all of them: pure compute. On CUDA
    the budget is a few MB of the L2 (a 1 MB matmul there would time its launch), and each call is
    timed with CUDA events."""
    if x.is_cuda:
        budget = max(budget, 32 << 20)
    rows = max(1, min(out, budget // (x.shape[1] * x.element_size())))
    w = torch.randn(rows, x.shape[1], dtype=x.dtype, device=x.device)
    return median_ms(lambda: torch.nn.functional.linear(x, w), 9, warm=2, sync=x.is_cuda) * out / rows


def compute_costs(target, widths, roofline_ms: float, peak_width: int = 256) -> dict:
    """What the matmuls alone cost by width, so a width curve can be judged against this machine:

    - ``gemm_hot_ms``: the model's linears at each width with their weights hot in cache (eager,
      this dtype): the kernels' compute with no memory traffic;
    - ``peak_gflops``: the best throughput those kernels reach (width ``peak_width``), and
      ``floor_ms``: max(memory roofline, matmul FLOPs / peak): a forward of that width runs faster
      only if its matmuls beat that peak. Attention and norms are left out (a few % of the FLOPs at
      1k context).
    """
    shapes = _linear_shapes(target)
    flops = 2 * sum(o * i * n for o, i, n in shapes)  # per position
    hidden = shapes[0][1]
    probe = max(shapes, key=lambda s: s[0] * s[1] * s[2] if s[1] == hidden else 0)
    x = torch.randn(peak_width, probe[1], dtype=target.dtype, device=target.device)
    peak = 2 * peak_width * probe[0] * probe[1] / (_hot_linear_ms(x, probe[0]) / 1e3) / 1e9
    hot = {}
    with torch.inference_mode():
        for width in widths:
            hot[str(width)] = sum(n * _hot_linear_ms(torch.randn(width, i, dtype=target.dtype, device=target.device), o)
                                  for o, i, n in shapes)
    peak = max([peak] + [int(w) * flops / (ms / 1e3) / 1e9 for w, ms in hot.items()])
    floor = {w: max(roofline_ms, 1e3 * int(w) * flops / (peak * 1e9)) for w in hot}
    return {"gflop_per_position": flops / 1e9, "peak_gflops": peak, "gemm_hot_ms": hot, "floor_ms": floor}


def prefill_ms(target, length: int, repeats: int = 5) -> float:
    with torch.inference_mode():  # inference tensors, as the engine's: compiled graphs guard on that
        cache = target.new_cache(length + 128)
        ids = random_ids(target, length, 1)
        return median_ms(lambda: target.forward(ids, cache, 0, head=True, prefill=True, last=True), repeats,
                         after=lambda: cache.crop(0), sync=target.device.type == "cuda")


def hf_step_ms(target, context: int = 256, new: int = 32, repeats: int = 3) -> float:
    """transformers' generate: ms per generated token (the prefill subtracted: new vs one token)."""
    ids = random_ids(target, context, 2, batch=True)
    clock = clock_for(target.device)  # synchronises on CUDA: generate's last kernels are timed too

    def run(n: int) -> float:
        started = clock()
        with torch.inference_mode():
            target.hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, pad_token_id=0)
        return clock() - started

    run(4)
    one = statistics.median(run(1) for _ in range(repeats))
    full = statistics.median(run(new) for _ in range(repeats))
    return 1e3 * (full - one) / (new - 1)


def hf_forward_ms(target, context: int, width: int, repeats: int = 7) -> float:
    """Median ms of one eager forward of the transformers model over ``width`` positions after
    ``context`` cached ones (logits for every position, as a verification needs)."""
    from transformers import DynamicCache
    ids = random_ids(target, context + width, 3, batch=True)
    with torch.inference_mode():
        cache = DynamicCache()
        target.hf(ids[:, :context], cache=cache, use_cache=True, logits_to_keep=1)
        # back to ``context`` cached positions after each call (transformers 5 crops by a negative count)
        return median_ms(lambda: target.hf(ids[:, context:], cache=cache, use_cache=True), repeats, warm=2,
                         after=lambda: cache.crop(-width), sync=target.device.type == "cuda")


def hf_step_and_forward_ms(target, context: int, rounds: int = 3) -> tuple[float, float]:
    """generate's step and a one-position forward at ``context``, timed in turns (medians of
    ``rounds``): the step includes such a forward, and the difference is what generate spends around
    it, so a disturbance must fall on both or on neither (timed one after the other, n10-v8's
    profile had the forward 16 ms above the whole step)."""
    pairs = [(hf_step_ms(target, context=context, repeats=1), hf_forward_ms(target, context, 1, repeats=3))
             for _ in range(rounds)]
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def hf_prefill_ms(target, length: int, repeats: int = 3) -> float:
    ids = random_ids(target, length, 4, batch=True)
    with torch.inference_mode():
        return median_ms(lambda: target.hf(ids, use_cache=True, logits_to_keep=1), repeats,
                         sync=target.device.type == "cuda")


def hf_costs(target, widths, contexts, log=print, prefills=PREFILLS) -> dict:
    """transformers' side of the profile in ``target``'s dtype: generate's step, its forward by width
    and context, its prefill by length; ``step_ms`` minus the one-position forward is what
    ``generate`` spends around each forward (logits processing, stopping checks, cache updates)."""
    step, one = hf_step_and_forward_ms(target, contexts[0])
    out = {"step_ms": step, "step_context": contexts[0]}
    out["by_width"] = {str(c): {str(w): one if (c, w) == (contexts[0], 1) else hf_forward_ms(target, c, w)
                                for w in widths} for c in contexts}
    out["prefill_ms"] = {str(n): hf_prefill_ms(target, n) for n in prefills}
    log(f"profile: transformers, {target.dtype}: generate {out['step_ms']:.1f} ms/token; forward "
        + " ".join(f"{w}:{v:.1f}" for w, v in out["by_width"][str(contexts[0])].items()))
    if why := hf_disturbed(out):
        log(f"profile: warning: {why}")
    return out


def hf_disturbed(h: dict) -> str | None:
    """Why transformers' timings contradict each other, or None: generate's step runs a
    one-position forward and more, so a one-position forward timed above the whole step was
    disturbed, and so are the predictions for transformers' decoders built on it (n10-v8's
    profile: 61 ms against a 44.8 ms step; timed alone afterwards, 40 against 44)."""
    one = h.get("by_width", {}).get(str(h.get("step_context")), {}).get("1")
    if one is None or one <= h["step_ms"]:
        return None
    return (f"transformers' one-position forward timed {one:.1f} ms, above generate's whole step ({h['step_ms']:.1f} ms) "
            "that includes one: one of them was disturbed (other work on the cores?), so the predictions for "
            "transformers' decoders are unreliable; rerun the profile on a quiet machine")


def _built(registry, kind, target, variants: dict | None, log):
    """(label, method) for each variant (label -> (method name, KEY=VALUE options); default: every
    method on its defaults) whose method is in ``kind``, built; one that cannot be is logged and
    left out."""
    variants = variants or {name: (name, []) for name in registry.methods}
    for label, (name, opts) in sorted(variants.items()):
        if name not in kind:
            continue
        try:
            yield label, build_method(registry, name, opts, target, 0.0)
        except UsageError as exc:
            log(f"profile: {label} left out ({exc})")


def _weights_options(registry, method) -> list[str]:
    """The method's options that only locate weights (the cost model matches a file without them)."""
    return sorted(o.name for o in registry.method(method.name).options if o.locates_weights)


def decoder_costs(target, registry, prompts: list[list[int]], hf: dict, tokens: int = 48, log=print,
                  variants: dict[str, tuple[str, list[str]]] | None = None) -> dict:
    """Per transformers decoder (``generate`` and its speculative peers): what its generations cost
    beyond transformers' prefill, each round's forward (by width, from ``hf``) and generate's
    per-step overhead, fitted (least squares, non-negative) as ms per round + ms per drafted token
    over two generations on each of ``prompts`` (chosen to draft differently, so the two separate).
    transformers does not expose its draft/verify split; this is the profile's stand-in for it."""
    from scipy.optimize import nnls

    from .costmodel import Profile, question_ms, turn_rounds
    dtype = str(target.dtype).removeprefix("torch.")
    out = {}
    for name, method in _built(registry, registry.decoders, target, variants, log):
        method.generate(prompts[0], Settings(max_new_tokens=8), 0)  # warm
        gens = [method.generate(p, Settings(max_new_tokens=tokens), 0) for p in prompts for _ in range(2)]
        zero = {"per_round_ms": 0.0, "draft_per_token_ms": 0.0}
        costs = Profile({"hf_generate": {dtype: hf}, "decoders": {name: zero}}).transformers_costs(dtype, name)
        rows = [(len(g.rounds) - 1, sum(r.drafted for r in g.rounds[1:]),
                 1e3 * g.wall_time - question_ms([turn_rounds(g.rounds)], costs)) for g in gens]
        if any(d for _, d, _ in rows):
            (per_round, per_token), _ = nnls([[n, d] for n, d, _ in rows], [res for _, _, res in rows])
        else:  # generate itself: nothing drafted, its overhead is already generate's step
            per_round = per_token = 0.0
        out[name] = {"method": method.name, "per_round_ms": float(per_round), "draft_per_token_ms": float(per_token),
                     "unexplained_ms": statistics.mean(res for _, _, res in rows),
                     "mean_drafted": sum(d for _, d, _ in rows) / max(sum(n for n, _, _ in rows), 1),
                     "options": method.options, "weights_options": _weights_options(registry, method)}
        log(f"profile: {name}: {per_round:.2f} ms per round + {per_token:.2f} ms per drafted token beyond "
            f"transformers' forwards and generate's step")
    return out


MIN_ROUNDS = 3  # a drafted count seen in fewer rounds gives no point of the draft-cost line


def _count_medians(rounds) -> tuple[dict[int, float], bool]:
    """Median draft seconds of each drafted count k >= 1, and whether two or more counts had
    ``MIN_ROUNDS`` rounds each (a line through them has a slope). Where fewer did, every count seen
    gives a point: dropping the sparse ones would leave one count, and a line through the origin
    whose per-token cost is that count's whole round."""
    by_k: dict[int, list[float]] = {}
    for r in rounds:
        if r.drafted:
            by_k.setdefault(r.drafted, []).append(r.draft_s)
    enough = {k: v for k, v in by_k.items() if len(v) >= MIN_ROUNDS}
    identified = len(enough) >= 2
    return {k: statistics.median(v) for k, v in sorted((enough if identified else by_k).items())}, identified


def draft_line(rounds) -> tuple[float, float, dict[int, float]]:
    """A drafter's cost in seconds as fixed per round + per drafted token, and the points the line is
    fitted through (``fit_line``): the median draft seconds of each drafted count (``_count_medians``).
    Medians, so one round disturbed on a shared machine moves nothing; one point per count, so the
    count a drafter drafts most does not decide the slope alone (n10-v12's least squares ran over
    rounds that nine times in ten drafted 6, early exit's gamma: its split between fixed and per-token
    cost rested on the few short rounds at the answers' ends). A round that drafts nothing is left
    out: early exit's then skips its passes, and the cost model charges such a round no drafting."""
    medians, _ = _count_medians(rounds)
    if not medians:
        return 0.0, 0.0, {}
    fixed, per = fit_line(list(medians), list(medians.values()))
    return fixed, per, medians


def pass_slope(rounds) -> float | None:
    """One pass's own per-token seconds, or None where fewer than two drafted counts have
    ``MIN_ROUNDS`` rounds in it (Kangaroo's eta stops most rounds at one draft): too few to be a slope."""
    medians, identified = _count_medians(rounds)
    return fit_line(list(medians), list(medians.values()))[1] if identified else None


# passes over the drafters, each generation a slice of the profile's tokens: a pass's line rests on a few dozen
# rounds and moved 0.7x-1.8x its byte roofline within one profile (AVX512 EPYC), so enough passes for an
# interval on their median (6 at least; 16: ranks 4 to 13, 97.9%); 16 rather than 4 added ~2 min to a profile
# of all 14 drafters there (results/smollm2-cpu-epyc-profile-v10)
PASSES = 16


def drafter_costs(target, registry, prompt: list[int], tokens: int = 48, log=print,
                  variants: dict[str, tuple[str, list[str]]] | None = None, passes: int = PASSES) -> dict:
    """Per drafter variant (label -> (method, KEY=VALUE options); default: each installed drafter
    on its defaults): its draft seconds as fixed per round + per drafted token (``draft_line``), and
    the engine's own cost per round (bookkeeping: verification excluded) at the method's own settings.

    The line's rounds run at each size a budget can pick where the drafter can be sized
    (``budget.sizes_for``: 1, 3, 6 drafts for early exit; the sizes ascending, then descending in the
    next pass), so their draft times span the drafter's range where a run's own sizes may not. Every
    drafter is timed in each of ``passes`` passes, in turn, so a slow spell on a shared machine falls
    on them all rather than on one drafter's line (the same drafter's per-token cost moved 1.5x between
    two back-to-back profiles on the AVX512 EPYC when each drafter was timed in one block)."""
    built = list(_built(registry, registry.drafters, target, variants, log))
    for _, method in built:
        target.expect_widths(method.max_width)
    sizes = {name: sizes_for(method.max_width - 1, target.backend.width) if method.at_size else []
             for name, method in built}
    for name, method in built:  # warm (greedy), at every size it is timed at: no graph is built while timing
        method.generate(prompt, Settings(max_new_tokens=8), 0)
        for n in sizes[name]:
            method.at_size(prompt, Settings(max_new_tokens=4), 0, n)
    own = {name: [] for name, _ in built}
    line = {name: [[] for _ in range(passes)] for name, _ in built}  # per pass: the rounds the line goes through
    part = Settings(max_new_tokens=max(tokens // 2, 4))
    for i in range(passes):
        for name, method in built:
            rounds = method.generate(prompt, part, 0).rounds[1:]
            own[name] += rounds
            if method.at_size:
                rounds = [r for n in (sizes[name] if i % 2 == 0 else sizes[name][::-1])
                          for r in method.at_size(prompt, part, 0, n).rounds[1:]]
            line[name][i] = rounds
    out = {}
    for name, method in built:
        rounds = own[name]
        fixed, per, medians = draft_line([r for rs in line[name] for r in rs])
        out[name] = {"method": method.name, "draft_fixed_ms": 1e3 * fixed, "draft_per_token_ms": 1e3 * per,
                     "draft_ms_by_drafted": {str(k): round(1e3 * s, 4) for k, s in medians.items()},
                     # each pass's own line: how far a minute's load on the machine moves it
                     "draft_per_token_ms_by_pass": [None if (b := pass_slope(rs)) is None else round(1e3 * b, 4)
                                                    for rs in line[name]],
                     "draft_line_rounds": sum(map(len, line[name])),
                     "bookkeeping_ms": 1e3 * statistics.mean(r.accept_s for r in rounds),
                     "mean_drafted": statistics.mean(r.drafted for r in rounds), "rounds": len(rounds),
                     "options": method.options, "draft_bytes": method.draft_bytes,
                     "weights_options": _weights_options(registry, method)}
        log(f"profile: {name}: draft {1e3 * fixed:.2f} ms + {1e3 * per:.2f} ms/token, bookkeeping "
            f"{out[name]['bookkeeping_ms']:.2f} ms/round")
    return out


def method_costs(model: str, device: str, threads: int, dtype: str, mode: str, registry, hf: dict, tokens: int,
                 log, variants: dict | None, passes: int = PASSES) -> dict:
    """The drafters' costs on the engine in (dtype, mode) and transformers' decoders' in dtype."""
    target = settled(Session(EngineRequest(model, dtype, mode, device, threads), registry=registry).target)
    prompt = target.chat_ids([{"role": "user", "content": PROFILE_PROMPT}])
    out = {"drafters": drafter_costs(target, registry, prompt, tokens, log, variants, passes),
           "drafters_config": {"dtype": dtype, "compile": mode}}
    if "by_width" in hf.get(dtype, {}):
        prompts = [target.chat_ids([{"role": "user", "content": text}]) for text in (PROFILE_PROMPT, COPY_PROMPT)]
        out["decoders"] = decoder_costs(target, registry, prompts, hf[dtype], tokens, log, variants)
    else:
        log(f"profile: transformers' peers left out: this profile has no transformers forward in {dtype}")
    measured = {d["method"] for d in [*out["drafters"].values(), *out.get("decoders", {}).values()]}
    out["left_out"] = left_out(registry.methods, variants, measured)
    return out


def settled(target):
    """``target`` once every graph its session left building in the background is built and loaded
    (a session returns when one has built: ``engine_choice.apply(wait=False)``), so no build shares the
    cores while the profile times: with a cold graph store, transformers' forward and the hot matmuls
    were timed beside the builds (a one-position forward above generate's whole step, the matmul peak
    at a third of a quiet profile's)."""
    if getattr(target.backend, "building", None):
        target.backend.finish()
    return target


def left_out(methods, variants: dict | None, measured: set[str]) -> list[str]:
    """The methods asked for (``variants``' methods; every one of ``methods`` when none were named)
    that were not measured: a method ``--methods`` did not name was never asked for, and is not
    "left out"."""
    asked = {name for name, _ in variants.values()} if variants else set(methods)
    return sorted(asked - measured)


def ms_text(ms: float) -> str:
    """Milliseconds as the profile prints them: 0.1 ms resolution on a CPU, three decimals below 1 ms
    (a GPU's roofline is ~0.06 ms)."""
    return f"{ms:.1f}" if abs(ms) >= 1 else f"{ms:.3f}"


def run_profile(model: str, device: str, threads: int, configs: list[tuple[str, str]], widths, contexts,
                out: Path, drafters: bool = True, log=print, variants: dict | None = None,
                registry=None, tokens: int = 48, prefills=PREFILLS, hf: bool = True, passes: int = PASSES) -> dict:
    """The profile of ``configs``, saved after every measured part (``complete`` false until the end),
    so an interrupted profile keeps what it measured. ``hf=False`` leaves transformers' costs out
    (the GPU check measures them once, in its eager part)."""
    registry = registry or build_registry()
    cuda = torch.device(device).type == "cuda"
    gbs = bandwidth_gbs(device=device)
    log(f"profile: {'device (HBM)' if cuda else 'read'} bandwidth {gbs:.1f} GB/s")
    gpu = {"gpu": torch.cuda.get_device_name(device), "bandwidth_method": bandwidth_method(device)} if cuda else {}
    result = provenance(model=model, device=device, threads=threads, cpu=engine_choice.cpu_name(), bandwidth_gbs=gbs,
                        configs=[], hf_generate={}, width_buckets=list(WIDTH_BUCKETS), complete=False, **gpu)
    rooflines = result["rooflines"] = {}
    for dtype, mode in configs:
        target = settled(Session(EngineRequest(model, dtype, mode, device, threads), registry=registry).target)
        if max(contexts) + max(widths) > target.max_context or max(prefills) > target.max_context:
            raise UsageError(f"--contexts {max(contexts)} + --widths {max(widths)} (or --prefills {max(prefills)}) "
                             f"positions exceed the {target.max_context} that '{target.name}' holds; give smaller ones")
        if dtype not in rooflines:
            nbytes = weight_bytes(target)
            rooflines[dtype] = {"weight_bytes": nbytes, "ms": 1e3 * nbytes / gbs / 1e9}
            log(f"profile: {dtype} roofline {ms_text(rooflines[dtype]['ms'])} ms per step ({nbytes / 1e6:.0f} MB)")
            rooflines[dtype].update(compute_costs(target, widths, rooflines[dtype]["ms"]))
            log(f"profile: {dtype} matmul peak {rooflines[dtype]['peak_gflops']:.0f} GFLOP/s; floor by width " + " ".join(
                f"{w}:{ms_text(v)}" for w, v in rooflines[dtype]["floor_ms"].items()))
            if hf:
                result["hf_generate"][dtype] = hf_costs(target, widths, contexts, log, prefills)
            save(result, out)
        started = time.perf_counter()
        got, why = target.engine["compile"], target.engine.get("compile_failed")
        if why:
            log(f"profile: {dtype}/{mode} left out: {why}")
            continue
        target.expect_widths(max(widths))  # verification widths: static graphs, as in a run
        row = {"dtype": dtype, "compile": got, **target.kernel_flags(), "engine_options": target.options.record(),
               "by_width": {}, "prefill_ms": {}}
        result["configs"].append(row)  # saved after each context: a stage stopped mid-row keeps its first curve
        for ctx in contexts:
            curve = engine_choice.width_curve_ms(target, ctx, widths)
            row["by_width"][str(ctx)] = {str(w): ms for w, ms in curve.items()}
            log(f"profile: {dtype}/{mode} ctx {ctx}: " + " ".join(
                f"{w}:{ms_text(v)}" for w, v in row["by_width"][str(ctx)].items()))
            save(result, out)
        row["prefill_ms"] = {str(n): prefill_ms(target, n) for n in prefills}
        row["setup_s"] = time.perf_counter() - started
        row["compile_s"] = target.backend.compile_s
        row.update(target.kernel_flags())  # a kernel that failed while measuring fell back to SDPA: say so
        save(result, out)
        del target
    step = lambda r: r["by_width"][str(contexts[0])]["1"]  # noqa: E731
    best = min(result["configs"], key=step)
    result["chosen"] = {"dtype": best["dtype"], "compile": best["compile"]}
    engine_choice.save_choice(model, device, threads, {
        "model": model, "device": device, "threads": threads, "chosen": result["chosen"],
        "candidates": [{"dtype": r["dtype"], "compile": r["compile"], "step_ms": step(r)} for r in result["configs"]],
        "measured": result["created"], "by": "specharness profile"})
    save(result, out)  # with its choice: an interrupted drafter part leaves a profile --drafters-only can finish
    log(f"profile: fastest vanilla step: {best['dtype']} / {best['compile']} ({step(best):.1f} ms); recorded as "
        "this machine's default")
    if drafters:
        result.update(method_costs(model, device, threads, best["dtype"], best["compile"], registry,
                                   result["hf_generate"], tokens, log, variants, passes))
    result["complete"] = True
    save(result, out)
    figure(result, out / "profile.png")
    return result


def save(result: dict, out: Path) -> None:
    """profile.json and profile.md, each written whole or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "profile.json", json.dumps(result, indent=1))
    write_text_atomic(out / "profile.md", markdown(result))


def curves(p: dict):
    """(dtype, how it ran, context, ms by width) of every forward the profile measured: the engine's
    configurations, then transformers' eager model (what its generate and peers run)."""
    for r in p["configs"]:
        for ctx, row in r["by_width"].items():
            yield r["dtype"], r["compile"], ctx, row
    for dtype, hf in p.get("hf_generate", {}).items():
        for ctx, row in hf.get("by_width", {}).items():
            yield dtype, "transformers (eager)", ctx, row
    for dtype, roof in p.get("rooflines", {}).items():
        if "floor_ms" in roof:
            yield dtype, "hot-weight matmuls", "-", roof["gemm_hot_ms"]
            yield dtype, "floor", "-", roof["floor_ms"]


def markdown(p: dict) -> str:
    ctxs = list(p["configs"][0]["by_width"]) if p["configs"] else []
    widths = list(p["configs"][0]["by_width"][ctxs[0]]) if ctxs else []
    lines = [f"# Engine profile: {p['model']} on {p.get('gpu') or p['cpu']} ({p['threads']} threads, torch {p['torch']})\n",
             f"{'Device (HBM)' if p.get('gpu') else 'Read'} bandwidth {p['bandwidth_gbs']:.1f} GB/s. Rooflines (weight bytes / bandwidth): " + ", ".join(
                 f"{d} {ms_text(r['ms'])} ms" for d, r in p["rooflines"].items()) + ". transformers' generate: " + ", ".join(
                 f"{d} {h['step_ms']:.1f} ms/token" for d, h in p["hf_generate"].items()) + ".\n",
             *(f"**Warning** ({d}): {why}.\n" for d, h in p["hf_generate"].items() if (why := hf_disturbed(h))),
             f"Command: `{p['command']}`\n",
             "| dtype | compile | context | " + " | ".join(f"T={w}" for w in widths) + " | T=8 / T=1 | T=32 / T=1 | "
             "step / fp32 roofline |", "|" + "---|" * (len(widths) + 6)]
    fp32 = p["rooflines"].get("float32", {}).get("ms") or (2 * p["rooflines"].get("bfloat16", {}).get("ms", float("nan")))
    for dtype, how, ctx, row in curves(p):
        ratio = lambda a: f"{row[a] / row['1']:.2f}" if a in row and "1" in row else "-"  # noqa: E731
        step = f"{row['1'] / fp32:.2f}" if "1" in row else "-"
        lines.append(f"| {dtype} | {how} | {ctx} | " + " | ".join(ms_text(row[w]) if w in row else "-" for w in widths)
                     + f" | {ratio('8')} | {ratio('32')} | {step} |")
    chosen = p.get("chosen")
    lines.append("\nms per forward (median); chosen default: " + (
        f"{chosen['dtype']} / {chosen['compile']} (fastest T=1 at context {ctxs[0] if ctxs else '-'})." if chosen
        else "none yet (an interrupted profile: the rows above are what it measured)."))
    if any("floor_ms" in r for r in p["rooflines"].values()):
        lines.append("\n*hot-weight matmuls*: the model's linears at that width with their weights in cache (eager, "
                     "no memory traffic). *floor*: max(roofline, matmul FLOPs / the best matmul throughput measured "
                     "here: " + ", ".join(f"{d} {r['peak_gflops']:.0f} GFLOP/s" for d, r in p["rooflines"].items()
                                           if "peak_gflops" in r)
                     + "); a forward of that width runs faster only if its matmuls beat the best throughput "
                     "measured here, so the floor's T=8 / T=1 and T=32 / T=1 are the flattest width curve this "
                     "machine allows.")
    if p.get("drafters"):
        rate = target_rate_gbs(p)
        lines += ["\n| drafter | draft ms/round (fixed) | draft ms per token | its byte roofline (MB read) | "
                  "per token / roofline | per token / target's rate | bookkeeping ms/round |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {n} | {d['draft_fixed_ms']:.2f} | {d['draft_per_token_ms']:.2f} | "
                  + " | ".join(_roofline_cells(d, p["bandwidth_gbs"])) + f" | {_rate_cell(d, rate)} | "
                  f"{d['bookkeeping_ms']:.2f} |" for n, d in p["drafters"].items()]
        lines.append("\n*draft ms*: a line through the median draft time of each number of drafts a round "
                     "proposed (rounds run at each size a budget can pick, where the drafter can be sized; the "
                     "fixed part is what a drafting round costs beyond its tokens). In brackets after *per token / "
                     "roofline*: the median of that ratio over each pass's own line (the profile's passes over the "
                     "drafters, each a few dozen rounds, which load on the machine moves) and an interval of at least "
                     "95% (order statistics, the passes taken as independent); their range where fewer than 6 passes "
                     "identify a line.")
        lines.append("*its byte roofline*: the weights one draft token reads (the drafter's ``draft_bytes``: its "
                     "layers, norms and head rows) over the bandwidth measured in this profile; a drafter that reads "
                     "none (retrieval) has no roofline.")
        if rate:
            lines.append(f"*target's rate*: the rate at which the target's own step reads its weights here, "
                         f"{rate:.1f} GB/s (its weight bytes over its cheapest step at widths 1-8, the step vanilla "
                         "runs, in the drafters' engine). A drafter at 1.00 reads its weights as fast as the target "
                         "does; above it, it loses time of its own (small calls, weights gone cold during each "
                         "verification). A tree drafter's token shares its pass with its siblings, and one whose draft time "
                         "does not grow with the size it is cut to (Medusa's heads: one call) has its cost in the "
                         "fixed part: the per-token columns do not judge it.")
    if p.get("left_out"):
        lines.append(f"\nLeft out (asked for, not measured; the profile's log says why): {', '.join(p['left_out'])}.")
    if p.get("decoders"):
        lines += ["\n| transformers decoder | ms per round | ms per drafted token | mean drafted per round |",
                  "|---|---|---|---|"]
        lines += [f"| {n} | {d['per_round_ms']:.2f} | {d['draft_per_token_ms']:.2f} | {d['mean_drafted']:.2f} |"
                  for n, d in p["decoders"].items()]
        lines.append("\nA transformers decoder's costs per round and per drafted token are fitted (least squares, "
                     "non-negative) to what its generations on two prompts took beyond transformers' prefill, its "
                     "forwards (by width, above) and generate's per-step overhead (generate's step minus its "
                     "one-position forward).")
    return "\n".join(lines) + "\n"


def target_rate_gbs(p: dict) -> float | None:
    """GB/s at which the target's step reads its weights: weight bytes over its cheapest forward of
    1-8 positions (the route pads vanilla's step to the fastest) at the profile's first context, in
    the engine the drafters were profiled on. Neither the target nor a drafter reaches the bandwidth
    of a streaming sum on every CPU; this is the rate a drafter can fairly be held to."""
    want = p.get("drafters_config") or p.get("chosen") or {}
    for c in p.get("configs", []):
        if (c["dtype"], c["compile"]) == (want.get("dtype"), want.get("compile")) and c.get("by_width"):
            row = next(iter(c["by_width"].values()))
            steps = [ms for w, ms in row.items() if int(w) <= 8]
            weights = p.get("rooflines", {}).get(c["dtype"], {}).get("weight_bytes")
            if steps and weights:
                return weights / min(steps) / 1e6
    return None


def _bytes_ms(d: dict, gbs: float) -> float:
    """ms one draft token's weights take to read at ``gbs``."""
    return d["draft_bytes"] / gbs / 1e6


def _rate_cell(d: dict, rate: float | None) -> str:
    """A drafter's per-token cost over what its bytes take at the target's own rate."""
    if not d.get("draft_bytes") or not rate:
        return "-"
    return f"{d['draft_per_token_ms'] / _bytes_ms(d, rate):.2f}"


def _roofline_cells(d: dict, gbs: float) -> tuple[str, str]:
    """A drafter's byte roofline (ms one draft token takes at ``gbs``, and its MB) and its measured
    per-token cost over it, then the median of the passes' own lines with its 95% interval (``median_ci``;
    their range where fewer than 6 passes identify a line); '-' for a drafter that reads no weights."""
    if not d.get("draft_bytes"):
        return "-", "-"
    ratios = [ms / _bytes_ms(d, gbs) for ms in d.get("draft_per_token_ms_by_pass") or [] if ms is not None]
    passes = median_ci(ratios)
    span = (f" (passes: {passes.fmt()})" if passes.method == "order statistics"
            else f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else "")
    return f"{_bytes_ms(d, gbs):.2f} ms ({d['draft_bytes'] / 1e6:.1f})", _rate_cell(d, gbs) + span


def figure(p: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    i = 0
    for dtype, how, ctx, row in curves(p):
        ax.plot([int(w) for w in row], list(row.values()), label=f"{dtype} {how}" + (f", ctx {ctx}" if ctx != "-" else ""),
                **style(i))
        i += 1
    for dtype, roof in p["rooflines"].items():
        ax.axhline(roof["ms"], color="black", linestyle=":" if dtype == "float32" else "--", linewidth=0.9)
        ax.text(1, roof["ms"], f" {dtype} roofline", va="bottom", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("positions per forward (width)")
    ax.set_ylabel("ms per target forward")
    ax.set_title(f"{p['model']}: forward cost by width ({p['bandwidth_gbs']:.0f} GB/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
