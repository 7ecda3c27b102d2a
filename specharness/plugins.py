"""The plugin manager: built-ins, the ``specharness`` entry-point group, and ``--plugin``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pluggy

from . import hookspecs
from .errors import UsageError
from .hookspecs import DecoderSpec, DrafterSpec, TrainerSpec, VerifierSpec

BUILTINS = (
    "specharness.verify",
    "methods.vanilla",
    "methods.hf_generate",
)
OPTIONAL_BUILTINS = (  # methods that arrive with later work; absent modules are skipped
    "methods.kangaroo",
    "methods.early_exit",
    "methods.medusa",
    "methods.hf_peers",
    "methods.oracle",
)


def load_plugin(ref: str) -> ModuleType:
    """Import a plugin given as a module name or a path to a .py file."""
    if ref.endswith(".py"):
        path = Path(ref)
        if not path.is_file():
            raise UsageError(f"plugin file '{ref}' does not exist")
        name = f"specharness_plugin_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise UsageError(f"plugin file '{ref}' failed to import: {type(exc).__name__}: {exc}") from None
        return module
    try:
        return importlib.import_module(ref)
    except ImportError as exc:
        raise UsageError(f"plugin module '{ref}' cannot be imported ({exc}); give an importable "
                         "module name or a path to a .py file") from None


@dataclass
class Registry:
    """Everything the loaded plugins contribute, by name."""

    pm: pluggy.PluginManager
    drafters: dict[str, DrafterSpec]
    decoders: dict[str, DecoderSpec]
    verifiers: dict[str, VerifierSpec]
    trainers: dict[str, TrainerSpec]

    @property
    def methods(self) -> list[str]:
        return sorted([*self.drafters, *self.decoders])

    def method(self, name: str) -> DrafterSpec | DecoderSpec:
        spec = self.drafters.get(name) or self.decoders.get(name)
        if spec is None:
            raise UsageError(f"unknown method '{name}'; available: {', '.join(self.methods)}")
        return spec

    def trainer(self, name: str) -> TrainerSpec:
        if name not in self.trainers:
            raise UsageError(f"unknown trainer '{name}'; available: {', '.join(sorted(self.trainers)) or 'none'}")
        return self.trainers[name]

    def verifier(self, name: str) -> VerifierSpec:
        if name not in self.verifiers:
            raise UsageError(f"unknown verifier '{name}'; available: {', '.join(sorted(self.verifiers))}")
        return self.verifiers[name]


def _collect(results: list[list], kind: str) -> dict:
    out: dict = {}
    for specs in results:
        for spec in specs or []:
            if spec.name in out:
                raise UsageError(f"two plugins define the {kind} '{spec.name}'; remove one of them")
            out[spec.name] = spec
    return out


def build_registry(plugins: list[str] | tuple = ()) -> Registry:
    pm = pluggy.PluginManager("specharness")
    pm.add_hookspecs(hookspecs.Hooks)
    for name in BUILTINS:
        pm.register(importlib.import_module(name), name=name)
    for name in OPTIONAL_BUILTINS:
        if importlib.util.find_spec(name) is not None:
            pm.register(importlib.import_module(name), name=name)
    pm.load_setuptools_entrypoints("specharness")
    for ref in plugins:
        module = load_plugin(ref)
        if not pm.is_registered(module):
            pm.register(module, name=f"plugin:{ref}")
    drafters = _collect(pm.hook.specharness_drafters(), "method")
    decoders = _collect(pm.hook.specharness_decoders(), "method")
    clash = set(drafters) & set(decoders)
    if clash:
        raise UsageError(f"method name(s) {', '.join(sorted(clash))} defined twice; rename one")
    return Registry(pm, drafters, decoders, _collect(pm.hook.specharness_verifiers(), "verifier"),
                    _collect(pm.hook.specharness_trainers(), "trainer"))
