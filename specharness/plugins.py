"""The plugin manager: built-ins, the ``specharness`` entry-point group, and ``--plugin``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import pluggy

from . import hookspecs
from .errors import UsageError
from .hookspecs import DecoderSpec, DrafterSpec, TrainerSpec, VerifierSpec

GROUP = "specharness"  # built-in methods register here too (pyproject.toml), exactly as third parties do
REPORT_GROUP = "specharness.report"  # report sections: light modules the report loads on its own


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


def entry_point_plugins(group: str, required: bool = True) -> list[tuple[str, ModuleType]]:
    """(name, module) of every entry point in ``group``. A plugin that fails to import is a one-line
    error, or (``required=False``) a one-line note and left out."""
    from importlib.metadata import entry_points
    out = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            out.append((ep.name, ep.load()))
        except Exception as exc:
            msg = f"plugin '{ep.name}' ({ep.value}) failed to import: {type(exc).__name__}: {exc}"
            if required:
                raise UsageError(f"{msg}; reinstall it, or uninstall the package that provides it") from None
            print(f"note: {msg}; its sections are left out", file=sys.stderr)
    return out


def new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("specharness")
    pm.add_hookspecs(hookspecs.Hooks)
    return pm


def check_hooks(pm: pluggy.PluginManager) -> None:
    """Every hook implementation must name a hook: a misspelt one would be silently ignored."""
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        known = ", ".join(sorted(n for n in dir(hookspecs.Hooks) if n.startswith("specharness_")))
        raise UsageError(f"{exc}; the hooks are: {known}") from None


def register_plugins(pm: pluggy.PluginManager, plugins: list[str] | tuple) -> None:
    """``--plugin`` modules registered, each required to implement a hook (a file that adds nothing
    is a mistake: a misnamed function, a missing @hookimpl), then every hook name checked."""
    for ref in plugins:
        module = load_plugin(ref)
        if pm.is_registered(module):
            continue
        pm.register(module, name=f"plugin:{ref}")
        if not pm.get_hookcallers(module):
            raise UsageError(f"plugin '{ref}' implements no specharness hook; decorate its functions with "
                             "@hookimpl (from specharness.hookspecs) and name them after a hook")
    check_hooks(pm)


def _with_budget(spec: DrafterSpec) -> DrafterSpec:
    """A sizable drafter gains the engine's option ``budget`` (``specharness.budget``); its own ``build``,
    ``params`` and ``info`` never see it (they may check their options against their own list)."""
    if not spec.sizable:
        return spec
    from .budget import OPTION
    if any(o.name == OPTION.name for o in spec.options):
        raise UsageError(f"method '{spec.name}' declares an option '{OPTION.name}', which the engine adds to every "
                         "sizable drafter; rename it")
    if spec.budget not in OPTION.choices:
        raise UsageError(f"method '{spec.name}' declares budget='{spec.budget}'; the choices are "
                         f"{', '.join(OPTION.choices)}")

    def own(fn):
        return fn and (lambda target, options: fn(target, {k: v for k, v in options.items() if k != OPTION.name}))
    return replace(spec, options=[*spec.options, replace(OPTION, default=spec.budget)], build=own(spec.build),
                   params=own(spec.params), info=own(spec.info))


def build_registry(plugins: list[str] | tuple = ()) -> Registry:
    pm = new_manager()
    for name, module in entry_point_plugins(GROUP):
        if not pm.is_registered(module):
            pm.register(module, name=name)
    if not pm.get_plugins():
        raise UsageError("no methods are registered: the package's entry points are missing; install it with "
                         "'pip install -e .' from the repository")
    register_plugins(pm, plugins)
    drafters = {name: _with_budget(spec) for name, spec in _collect(pm.hook.specharness_drafters(), "method").items()}
    decoders = _collect(pm.hook.specharness_decoders(), "method")
    clash = set(drafters) & set(decoders)
    if clash:
        raise UsageError(f"method name(s) {', '.join(sorted(clash))} defined twice; rename one")
    return Registry(pm, drafters, decoders, _collect(pm.hook.specharness_verifiers(), "verifier"),
                    _collect(pm.hook.specharness_trainers(), "trainer"))
