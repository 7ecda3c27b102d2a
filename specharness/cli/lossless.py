"""``lossless``: is a method lossless? Greedy identity against vanilla on real prompts, and
chi-square tests of sampled sequences (``specharness.lossless`` holds the checks; this module
parses, validates and reports)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import identity
from .. import lossless as checks
from ..distributions import POWER_GOAL
from ..errors import UsageError
from ..results import check_writable
from ..runner import build_method
from ..session import check_threads


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lossless", help="check a method is lossless: greedy identity, sampled distributions",
        description="Greedy: token-identical to vanilla on Spec-Bench prompts, whole turns (near-ties told from "
                    "bugs against a float32 reference and a bound the engine cannot widen). Sampling: chi-square of sampled sequences against the exact "
                    "distribution, (a) on a tiny model, first k tokens enumerated; (c) the same with longer "
                    "generations, so rejections happen at the 2nd draft of a round or later; (b) on the real "
                    "model, first token and second given first. Exits 1 on a failure.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--method", default=None, help="method to check (see 'specharness list')")
    p.add_argument("--certify", default=None, metavar="RESULT_DIR",
                   help="instead: certify every greedy divergence in a benchmark's result files (near-tie or "
                        "bug, against the float32 reference's top logit) and write identity_certified.json for the report")
    p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE", help="method option")
    p.add_argument("--tiny-option", action="append", default=[], metavar="KEY=VALUE",
                   help="method option for levels (a) and (c) only, on the tiny model; the method's own tiny "
                        "defaults (e.g. a random adapter) apply first")
    p.add_argument("--verifier", default=None,
                   help="acceptance rule(s), comma-separated: each applies to the levels of its kind "
                        "(greedy or sampling); default greedy / speculative-sampling")
    p.add_argument("--levels", default="greedy,a,b,c", help="which checks: greedy, a, b, c")
    p.add_argument("--model", default="smollm2", help="target for the greedy and (b) checks")
    p.add_argument("--dtype", default="float32", help="target dtype (float32: strict identity; lower: near-ties certified)")
    p.add_argument("--compile", default="none", choices=("none", "default", "max-autotune"),
                   help="run the target compiled, as a benchmark at that setting does")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py")
    p.add_argument("--bench", default=None, choices=("sample", "spec-bench"),
                   help="question set for the greedy check (as in 'run')")
    p.add_argument("--bench-file", default=None, help="question.jsonl for the greedy check (as in 'run')")
    p.add_argument("--subtasks", default=None, help="comma-separated subtasks for the greedy check (default all)")
    p.add_argument("--limit", type=int, default=1, help="questions per subtask for the greedy check")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per turn in the greedy check")
    p.add_argument("--tolerance", type=float, default=None,
                   help="how far below the float32 reference's top logit both diverging tokens may sit for a "
                        "near-tie (default 1e-4 in float32; in float16/bfloat16 the larger of a fixed bound of a few "
                        "ulps and transformers' own forward's measured rounding, see specharness/identity.py)")
    p.add_argument("--temperature", type=float, default=1.3, help="sampling temperature of (a), (b), (c)")
    p.add_argument("--tiny-vocab", type=int, default=8, help="vocabulary of the tiny model in (a)")
    p.add_argument("--k", type=int, default=3, help="tokens whose joint distribution (a) enumerates")
    p.add_argument("--tiny-vocab-c", type=int, default=4, help="vocabulary of the tiny model in (c)")
    p.add_argument("--k-c", type=int, default=5, help="tokens whose joint distribution (c) enumerates (>= 4)")
    p.add_argument("--samples-a", type=int, default=None, help="N for (a) (default: chosen for power)")
    p.add_argument("--samples-b", type=int, default=None, help="N for (b) (default: chosen for power, capped)")
    p.add_argument("--samples-c", type=int, default=None, help="N for (c) (default: chosen for power)")
    p.add_argument("--max-samples-b", type=int, default=checks.B_MAX_SAMPLES,
                   help="cap on the N (b) chooses for power; the power at the cap is reported")
    p.add_argument("--effect-a", type=float, default=0.1, help="effect size w (a) must detect with power 0.9")
    p.add_argument("--effect-b", type=float, default=0.2, help="effect size w (b) must detect with power 0.9")
    p.add_argument("--effect-c", type=float, default=0.15, help="effect size w (c) must detect with power 0.9")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of each level")
    p.add_argument("--seed", type=int, default=1234, help="first seed of the sampled sequences")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the full report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _say_exercised(r: dict, method: str) -> None:
    e = r["exercised"]
    if e["drafted"]:
        rejected = ", ".join(f"{t['rejected']} at draft {i}" for i, t in e["by_position"].items() if t["rejected"])
        print(f"  speculative path exercised: {e['drafted']} drafts proposed in {e['speculative_rounds']} rounds, "
              f"{e['accepted']} accepted; rejections: {rejected or 'none'}; {e['eos_stops']} generations ended at EOS")
    elif method != "vanilla":
        print(f"  note: {method} proposed no drafts here, so only plain sampling was tested")


def _split_verifiers(registry, text: str | None, levels: list[str]) -> dict[bool, str | None]:
    """--verifier's rules by kind (sampling or not), each required to have a level of its kind to run in."""
    out: dict[bool, str | None] = {False: None, True: None}
    names = [v.strip() for v in (text or "").split(",") if v.strip()]
    if text is not None and not names:
        raise UsageError(f"--verifier '{text}' names no acceptance rule; leave it out for the defaults")
    for name in names:
        sampling = registry.verifier(name).sampling
        if not set(levels) & ({"a", "b", "c"} if sampling else {"greedy"}):
            kind, which = ("a sampling rule", "a, b or c") if sampling else ("a greedy rule", "greedy")
            raise UsageError(f"--verifier {name} is {kind}, but --levels {','.join(levels)} runs no check it "
                             f"applies to; add {which} to --levels, or leave --verifier out")
        out[sampling] = name
    return out


def _check_args(args) -> list[str]:
    if args.dtype not in ("float32", "bfloat16", "float16"):
        raise UsageError(f"lossless --dtype '{args.dtype}': give float32, bfloat16 or float16 (the check's bound "
                         "depends on it)")
    levels = [x.strip() for x in args.levels.split(",") if x.strip()]
    bad = [x for x in levels if x not in ("greedy", "a", "b", "c")]
    if bad or not levels:
        raise UsageError(f"--levels takes greedy, a, b, c (comma-separated), got '{args.levels}'")
    if args.tiny_option and not {"a", "c"} & set(levels):
        raise UsageError("--tiny-option sets the tiny model's method for levels a and c, which --levels leaves out; "
                         "add them or drop --tiny-option")
    if args.temperature <= 0:
        raise UsageError("--temperature must be > 0: levels (a), (b) and (c) test sampling")
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.k < 2 or args.tiny_vocab < 2 or args.tiny_vocab ** args.k > 200_000:
        raise UsageError("--k >= 2 and --tiny-vocab >= 2 with tiny_vocab**k <= 200000 cells")
    if args.k_c < 4 or args.tiny_vocab_c < 2 or args.tiny_vocab_c ** args.k_c > 200_000:
        raise UsageError("--k-c >= 4 (so a round can hold 2+ drafts) and --tiny-vocab-c >= 2 with "
                         "tiny_vocab_c**k_c <= 200000 cells")
    for name in ("samples_a", "samples_b", "samples_c", "max_samples_b"):
        if getattr(args, name) is not None and getattr(args, name) < 10:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 10")
    check_threads(args.threads)
    for name in ("effect_a", "effect_b", "effect_c"):  # w = 0 would need infinite samples
        if not 0 < getattr(args, name) < float("inf"):
            raise UsageError(f"--{name.replace('_', '-')} must be a positive effect size w, got {getattr(args, name)}")
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.tolerance is not None and not 0 <= args.tolerance < float("inf"):
        raise UsageError(f"--tolerance must be a logit margin >= 0, got {args.tolerance}")
    if args.json:
        check_writable(Path(args.json), "--json")
    return levels


def _tiny_method(args, registry, level: str, verifier: str | None):
    """(tiny model, method) for level (a) or (c): a tiny random llama, the method built with its
    tiny defaults. Built before any level runs, so a method that cannot run there says so at once.
    Level (c)'s model ends sequences at token 0 (about half its 5-token generations stop there, after
    1.7 speculative rounds on average), so generations also stop inside a round, where a drafter's
    accepted path is cut at the EOS."""
    from ..model import TargetModel
    vocab = args.tiny_vocab if level == "a" else args.tiny_vocab_c
    tiny = TargetModel.tiny("llama", vocab_size=vocab, n_layers=4, hidden_size=32, n_heads=4, n_kv_heads=2, seed=0,
                            eos=0 if level == "c" else None)
    spec = registry.method(args.method)
    defaults = [f"{key}={value}" for key, value in getattr(spec, "tiny_options", {}).items()]
    try:
        method = build_method(registry, args.method, defaults + args.option + args.tiny_option, tiny, args.temperature,
                              verifier)
    except UsageError as exc:
        raise UsageError(f"level ({level}) cannot build '{args.method}' on the tiny model ({exc}); pass options "
                         f"for it with --tiny-option, or leave it out with --levels") from None
    return tiny, method


def _tiny_level(args, tiny, method, level: str, progress: bool) -> dict:
    """Level (a) or (c) on the tiny model."""
    import torch
    vocab, k = (args.tiny_vocab, args.k) if level == "a" else (args.tiny_vocab_c, args.k_c)
    n, w = (args.samples_a, args.effect_a) if level == "a" else (args.samples_c, args.effect_c)
    prompt = [1, 2, 3, 4, 5][: max(1, vocab - 1)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's ops are too small to share; threads only add overhead
    try:
        run = checks.level_a if level == "a" else checks.level_c
        r = run(method, tiny, prompt, k, args.temperature, n, w, args.alpha, args.seed, progress)
    finally:
        torch.set_num_threads(threads)
    r["verifier"], r["options"] = method.verifier, method.options
    t = r["test"]
    print(f"sampling ({level}): tiny llama, vocab {vocab}, first {k} tokens at T={args.temperature:g}: "
          f"N={r['samples']} (seeds from SeedSequence({args.seed}); power {r['power']:.2f} against w={w:g} at "
          f"alpha={args.alpha:g}), {r['cells']} cells pooled to {t['cells']}: chi2={t['statistic']:.1f}, "
          f"df={t['df']}, p={t['p_value']:.3g} -> {'PASS' if r['passed'] else 'FAIL'}")
    _say_exercised(r, args.method)
    if level == "c" and not r["late_exercised"]:
        print(f"  FAIL: no draft at position {r['late_position']} or later was rejected, so later positions "
              "were not tested; let the method draft longer on the tiny model (--tiny-option)")
    return r


def cmd_lossless(args) -> int:
    import torch
    if args.certify:
        if not Path(args.certify).is_dir():
            raise UsageError(f"--certify: '{args.certify}' is not a directory of result files")
        if args.threads:
            torch.set_num_threads(check_threads(args.threads))
        results = identity.certify(Path(args.certify), args.bench_file)
        bugs = sum(r["bug"] for r in results.values())
        total = lambda key: sum(r[key] for r in results.values())  # noqa: E731
        print(f"certify: {len(results)} file(s), {total('near_tie')} certified near-tie(s)"
              f"{identity.aside(total('near_tie_rounding_only'), identity.ROUNDING_ONLY)}, {bugs} bug(s)"
              f"{identity.aside(total('bug_vanilla_only'), identity.VANILLA_ONLY)} -> {'FAIL' if bugs else 'PASS'}")
        return 1 if bugs else 0
    if not args.method:
        raise UsageError("lossless needs --method NAME (or --certify RESULT_DIR)")

    from ..plugins import build_registry
    from ..session import EngineRequest, Session
    levels = _check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    registry = build_registry(args.plugin)
    registry.method(args.method)
    verifiers = _split_verifiers(registry, args.verifier, levels)
    report: dict[str, Any] = {"method": args.method, "options": args.option, "verifiers": verifiers,
                              "levels": {}, "command": "python -m specharness " + " ".join(sys.argv[1:])}
    failed = False
    progress = not args.quiet and sys.stderr.isatty()

    # every level's method is built now, before any level spends time: one that cannot run says why
    tiny = {level: _tiny_method(args, registry, level, verifiers[True]) for level in ("a", "c") if level in levels}
    target = None
    if "greedy" in levels or "b" in levels:
        request = EngineRequest(args.model, args.dtype, args.compile, args.device, args.threads)
        target = Session(request, registry=registry).target
    sampled = (build_method(registry, args.method, args.option, target, args.temperature, verifiers[True])
               if "b" in levels else None)

    if "greedy" in levels:
        from ..tasks.specbench import describe_selection, find_question_file, load_questions, parse_subtasks, select
        ref = identity.Reference(target)
        tol = identity.bound_for(target, ref, args.dtype, args.tolerance)
        source = find_question_file(args.bench_file, args.bench)
        available, subtasks = load_questions(source.path), parse_subtasks(args.subtasks)
        qs = select(available, subtasks, args.limit)
        method = build_method(registry, args.method, args.option, target, 0.0, verifiers[False])
        vanilla = build_method(registry, "vanilla", [], target, 0.0, None)
        for line in describe_selection(source, available, subtasks, args.limit):
            print(line, file=sys.stderr)
        print(f"greedy: {args.method} (verifier {method.verifier}) vs vanilla on {len(qs)} questions, "
              f"{args.max_new_tokens} tokens per turn, {target.name} {args.dtype}; near-tie bound {tol.basis}")
        g = identity.greedy_check(target, method, vanilla, qs, args.max_new_tokens, tol, ref=ref)
        print(f"greedy: {g.identical_turns}/{g.turns} turns identical, {g.tokens_compared} tokens compared; "
              f"{len(g.divergences)} divergence(s): {g.certified} certified near-tie(s)"
              f"{identity.aside(g.rounding_only, identity.ROUNDING_ONLY)}, {g.uncertified} uncertified "
              f"(largest gap {g.largest_gap:.3g}) -> {'PASS' if g.passed else 'FAIL'}")
        report["levels"]["greedy"] = {**g.as_dict(), "passed": g.passed}
        failed |= not g.passed

    for level in ("a", "c"):
        if level in tiny:
            r = _tiny_level(args, *tiny[level], level, progress)
            report["levels"][level] = r
            failed |= not r["passed"]

    if sampled is not None:
        method = sampled
        if target.tokenizer is not None:
            prompt = target.tokenizer(checks.B_PROMPT, add_special_tokens=False)["input_ids"]
        else:
            prompt = [1, 2, 3]
        r = checks.level_b(method, target, prompt, args.temperature, args.samples_b, args.effect_b, args.alpha,
                    args.seed, progress, max_samples=args.max_samples_b)
        r["verifier"] = method.verifier
        r["prompt_text"] = checks.B_PROMPT
        t1, t2 = r["first_token"], r["second_given_first"]
        capped = (f"; capped from {r['samples_for_power']} (--max-samples-b), so this is the power at the cap"
                  if r["capped"] else "")
        print(f"sampling (b): {target.name}, prompt {checks.B_PROMPT!r}, T={args.temperature:g}: N={r['samples']} (seeds "
              f"from SeedSequence({args.seed}); power {r['power_first_token']:.2f} against "
              f"w={args.effect_b:g} at alpha/2{capped}); first token chi2={t1['statistic']:.1f}, df={t1['df']}, "
              f"p={t1['p_value']:.3g}; second given first chi2={t2['statistic']:.1f}, df={t2['df']}, "
              f"p={t2['p_value']:.3g} -> {'PASS' if r['passed'] else 'FAIL'}")
        _say_exercised(r, args.method)
        report["levels"]["b"] = r
        failed |= not r["passed"]

    report["passed"] = not failed
    # a sample size the user set below what the level's effect size needs: its PASS says little
    powers = {lv: r.get("power", r.get("power_first_token")) for lv, r in report["levels"].items()
              if lv in ("a", "b", "c") and getattr(args, f"samples_{lv}") is not None}
    weak = [f"({lv}) at power {pw:.2f}" for lv, pw in powers.items() if pw < POWER_GOAL]
    if weak and not failed:
        print(f"  note: {', '.join(weak)} < {POWER_GOAL}: too few samples for the checks to catch a sampler off by "
              "their effect sizes; drop --samples-X (each level then picks N for power)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    print(f"lossless {args.method}: {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0
