"""What several commands share: the one-line argparse error, the model-and-machine flags, the
question-and-decoding flags, and the engine request they make."""

from __future__ import annotations

import argparse

from ..session import ENGINE_CHOICES, EngineRequest


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block): the same shape as every other bad input."""

    def error(self, message: str):
        self.exit(2, f"specharness: error: {message} (see '{self.prog} --help')\n")


def model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and machine")
    g.add_argument("--model", default="smollm2",
                   help="'smollm2' (embedded default), a .gguf file, or a local Hugging Face directory "
                        "(LLaMA, Mistral or Qwen2 family) (default: %(default)s)")
    g.add_argument("--dtype", default="auto",
                   help="auto | float32 | bfloat16 | float16; auto = the dtype of the fastest vanilla on this "
                        "machine, measured once and cached ($SPECHARNESS_ENGINE=DTYPE/MODE pins it) (default: %(default)s)")
    g.add_argument("--compile", default="auto", choices=("auto", "none", "default", "max-autotune"),
                   help="run the target compiled (torch.compile; inductor freezing on CPU) or eagerly ('none'); "
                        "auto = measured with --dtype auto; compilation happens in warm-up, never timed "
                        "(default: %(default)s)")
    g.add_argument("--engine", default="auto", choices=ENGINE_CHOICES,
                   help="quick = nothing compiled: the faster eager dtype, chosen in seconds, for iterating on a "
                        "drafter; its numbers are flagged as not comparable with compiled runs (default: %(default)s)")
    g.add_argument("--device", default="cpu", help="cpu | cuda (default: %(default)s)")
    g.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads, recorded in every result (default: every core this process may run on)")
    g.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help="load a third-party plugin (repeatable)")


def decode_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("questions and decoding")
    g.add_argument("--bench", default=None, choices=("sample", "spec-bench"),
                   help="question set: 'sample' (built in, 2 per subtask) or 'spec-bench' (Spec-Bench's 480 "
                        "questions, downloaded once from a pinned commit and checked by sha256) "
                        "(default: $SPECHARNESS_SPECBENCH if set, else sample)")
    g.add_argument("--bench-file", default=None,
                   help="a Spec-Bench-format question.jsonl to use instead")
    g.add_argument("--subtasks", default=None,
                   help="comma-separated: multi_turn,translation,summarization,qa,math_reasoning,rag (default: all)")
    g.add_argument("--limit", type=int, default=None, help="first N questions of each subtask (default: all)")
    g.add_argument("--max-new-tokens", type=int, default=128, help="per turn (default: %(default)s)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="base seed; each question derives its own (default: %(default)s)")
    g.add_argument("--verifier", default=None,
                   help="acceptance rule (default: greedy at temperature 0, speculative-sampling above)")
    g.add_argument("--repeats", type=int, default=3, help="timed runs per question and method; the median is kept (default: %(default)s)")
    g.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs before the first question (default: %(default)s)")
    g.add_argument("--resume", action="store_true", help="continue an existing result file, skipping finished questions")
    g.add_argument("--overwrite", action="store_true", help="replace an existing result file")


def engine_request(args: argparse.Namespace) -> EngineRequest:
    """The engine the model-and-machine flags ask for."""
    return EngineRequest(args.model, args.dtype, getattr(args, "compile", "none"), args.device, args.threads,
                         getattr(args, "engine", "auto"))
