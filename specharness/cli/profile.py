"""``profile``: what the engine costs here (``specharness.profile`` measures; this module parses)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import profile as engine_profile
from ..engine_options import COMPILE_CHOICES, DTYPE_CHOICES
from ..errors import UsageError
from ..model.engine_choice import CANDIDATES
from ..options import method_variants, resolve_options
from ..plugins import build_registry
from ..results import git_commit, provenance
from ..session import check_threads


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="what the engine costs here: forward by width, roofline, drafters",
                       description=engine_profile.__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--configs", default=",".join(f"{d}/{m}" for d, m in CANDIDATES),
                   help="DTYPE/MODE list (default: every candidate)")
    p.add_argument("--widths", default=",".join(map(str, engine_profile.WIDTHS)))
    p.add_argument("--contexts", default=",".join(map(str, engine_profile.CONTEXTS)))
    p.add_argument("--prefills", default=",".join(map(str, engine_profile.PREFILLS)),
                   help="prompt lengths whose prefill is timed, ours and transformers' (default: %(default)s)")
    p.add_argument("--no-drafters", action="store_true", help="skip the drafters' and transformers peers' costs")
    p.add_argument("--tokens", type=int, default=48,
                   help="tokens per generation when measuring a transformers peer (two each, after a warm-up); "
                        "a drafter's generations are half as long, several a pass (default: %(default)s)")
    p.add_argument("--passes", type=int, default=engine_profile.PASSES,
                   help="passes over the drafters, each timing every drafter in turn at its own size and at each "
                        "size a budget can pick; profile.md gives the median of the passes' lines with its 95%% interval "
                        "(from 6 passes) (default: %(default)s)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="METHOD.KEY=VALUE",
                   help="a method's option for its costs, repeatable, e.g. -o self-spec.trials=8 "
                        "(default: every method on its defaults)")
    p.add_argument("--methods", default="", metavar="LIST",
                   help="profile only these methods (comma-separated; default: every installed one) and the "
                        "--variant ones")
    p.add_argument("--variant", action="append", default=[], metavar="METHOD:KEY=VALUE...",
                   help="also profile a method on these options, repeatable (e.g. medusa:tree=chain): the cost "
                        "model explains a result file with the variant whose options are the file's")
    p.add_argument("--drafters-only", action="store_true",
                   help="measure only the drafters' and transformers peers' costs, into the profile already in --out "
                        "(after training a drafter)")
    p.add_argument("--out", default="results/profile", help="output directory (default: %(default)s)")


def profiled(registry, methods: str, variant: list[str], option: list[str]) -> dict[str, tuple[str, list[str]]]:
    """The methods to profile (``--methods``, default every installed one) and the ``--variant`` ones,
    label -> (method, KEY=VALUE options), each option checked now, not when its drafter is reached."""
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if methods.strip() and not names:
        raise UsageError(f"--methods '{methods}' names no method; leave it out to profile every installed one")
    names = names or list(registry.methods)
    chosen = {label: label.split(":")[0] for label in [*names, *variant]}
    for label, method in chosen.items():
        if method not in registry.methods:
            what = f"--variant '{label}'" if label in variant else "--methods"
            raise UsageError(f"{what}: no method '{method}'; installed: {', '.join(sorted(registry.methods))}")
    for item in option:
        key = item.split("=", 1)[0]
        method = key.split(".")[0]
        if "." in key and method in registry.methods and method not in chosen.values():
            raise UsageError(f"-o {item}: method '{method}' is not profiled; add it to --methods")
    variants = method_variants(names + variant, option)
    for name, opts in variants.values():
        resolve_options(name, registry.method(name).options, opts)
    return variants


def cmd_profile(args: argparse.Namespace) -> int:
    import torch
    threads = check_threads(args.threads)
    torch.set_num_threads(threads)  # before the bandwidth is measured: rooflines at --threads
    try:
        configs = [tuple(c.split("/")) for c in args.configs.split(",") if c]
        widths = [int(w) for w in args.widths.split(",")]
        contexts = [int(c) for c in args.contexts.split(",")]
        prefills = [int(n) for n in args.prefills.split(",")]
    except ValueError:
        raise UsageError("--configs DTYPE/MODE,...; --widths, --contexts and --prefills comma-separated "
                         "integers") from None
    if not configs:
        raise UsageError(f"--configs '{args.configs}' names no DTYPE/MODE; e.g. --configs bfloat16/default,float32/none")
    for c in configs:
        if len(c) != 2 or c[0] not in DTYPE_CHOICES[1:] or c[1] not in COMPILE_CHOICES[1:]:
            raise UsageError(f"--configs: '{'/'.join(c)}' is not DTYPE/MODE (e.g. bfloat16/default)")
    if not widths or min(widths) < 1 or not contexts or min(contexts) < 1 or not prefills or min(prefills) < 1:
        raise UsageError("--widths, --contexts and --prefills must be positive")
    if args.tokens < 4:
        raise UsageError(f"--tokens {args.tokens}: a drafter needs at least 4 tokens to show its rounds")
    if args.passes < 1:
        raise UsageError(f"--passes {args.passes}: at least one pass over the drafters")
    registry = build_registry()
    variants = profiled(registry, args.methods, args.variant, args.option)
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if args.drafters_only:
        path = Path(args.out) / "profile.json"
        if not path.is_file():
            raise UsageError(f"--drafters-only updates a profile: '{path}' does not exist; run profile first")
        result = json.loads(path.read_text())
        if not isinstance(result, dict) or "chosen" not in result:
            raise UsageError(f"'{path}' stopped before its engine configurations were measured (no 'chosen'); run "
                             "profile again without --drafters-only")
        dtype, mode = result["chosen"]["dtype"], result["chosen"]["compile"]
        result.update(engine_profile.method_costs(args.model, args.device, threads, dtype, mode, registry, result["hf_generate"],
                                   args.tokens, log, variants, args.passes))
        result["drafters_command"] = provenance()["command"]
        result["drafters_git_commit"] = git_commit()
        engine_profile.save(result, Path(args.out))
        print(f"updated the drafters of {path}")
        return 0
    engine_profile.run_profile(args.model, args.device, threads, configs, widths, contexts, Path(args.out),
                not args.no_drafters, log=log, variants=variants, registry=registry, tokens=args.tokens,
                prefills=prefills, passes=args.passes)
    print(f"wrote {args.out}/profile.json, profile.md, profile.png")
    return 0
