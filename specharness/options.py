"""Declared method options and their validation (``-o KEY=VALUE`` on the command line)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import UsageError

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


@dataclass(frozen=True)
class OptionSpec:
    """One option a method declares: name, type, default, valid range and help text."""

    name: str
    type: str  # "int" | "float" | "str" | "bool"
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    # it only says where trained weights come from: weights of the same shape cost the same, so a
    # profile timed on other (e.g. random) weights explains a run on these (specharness.costmodel)
    locates_weights: bool = False

    def describe_range(self) -> str:
        if self.choices:
            return "one of " + ", ".join(str(c) if c != "" else "'' (empty)" for c in self.choices)
        lo = "-inf" if self.min is None else self.min
        hi = "inf" if self.max is None else self.max
        return f"[{lo}, {hi}]" if self.type in ("int", "float") else self.type

    def parse(self, method: str, raw: Any) -> Any:
        if self.type == "bool" and isinstance(raw, str):
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise UsageError(f"option {method}.{self.name} must be true or false, got '{raw}'")
            value: Any = raw.lower() in ("1", "true", "yes")
        else:
            try:
                value = _TYPES[self.type](raw) if raw is not None else None
            except (TypeError, ValueError):
                raise UsageError(f"option {method}.{self.name} must be {self.type}, got '{raw}'") from None
        if value is None:
            return value
        if value != value or value in (float("inf"), float("-inf")):  # nan passes every range check, inf the open ones
            raise UsageError(f"option {method}.{self.name} must be a finite number, got '{raw}'")
        if self.choices and value not in self.choices:
            raise UsageError(f"option {method}.{self.name}={raw} is not {self.describe_range()}")
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise UsageError(f"option {method}.{self.name}={raw} is outside {self.describe_range()}")
        return value


def resolve_options(method: str, specs: list[OptionSpec], given: dict[str, Any] | list[str]) -> dict[str, Any]:
    """Defaults overlaid with the given values, each checked against its declaration."""
    if isinstance(given, list):
        pairs = {}
        for item in given:
            if "=" not in item:
                raise UsageError(f"option '{item}' is not KEY=VALUE; write e.g. -o gamma=4")
            key, value = item.split("=", 1)
            pairs[key.strip()] = value.strip()
        given = pairs
    known = {s.name: s for s in specs}
    for key in given:
        if key not in known:
            valid = ", ".join(known) or "none"
            raise UsageError(f"method '{method}' has no option '{key}'; its options: {valid}")
    return {s.name: s.parse(method, given.get(s.name, s.default)) if s.name in given else s.default
            for s in specs}


def method_variants(labels: list[str], raw: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Each label's method and options: ``NAME[:KEY=VALUE...]`` in the list, plus -o values given
    as METHOD.KEY=VALUE (or plain KEY=VALUE when a single method runs)."""
    out = {label: (label.split(":")[0], label.split(":")[1:]) for label in labels}
    for label, (name, inline) in out.items():
        bare = next((o for o in inline if "=" not in o), None)
        if bare is not None:
            raise UsageError(f"'{label}' in --methods: '{bare}' is not KEY=VALUE; write {name}:KEY=VALUE "
                             "('specharness list' names its options)")
    for item in raw:
        owner = max((lb for lb in labels if item.startswith(lb + ".")), key=len, default=None)
        named = item.split("=", 1)[0].rpartition(".")[0]  # "kangaroo" in kangaroo.eta=0.3
        label = next((lb for lb in labels if named and out[lb][0] == named), None)  # it runs under another label
        if owner:  # the longest label wins, so a label holding "eta=0.3" is not split at its dot
            out[owner][1].append(item[len(owner) + 1:])
        elif label:
            raise UsageError(f"option '{item}': '{named}' runs as '{label}'; write {label}.KEY=VALUE, or put the "
                             f"option in the label ({label}:KEY=VALUE)")
        elif named:
            raise UsageError(f"option '{item}' names '{named}', which is not among the methods run "
                             f"({', '.join(labels)}); name one of them, or add '{named}' to the methods")
        elif len(labels) == 1:
            out[labels[0]][1].append(item)
        else:
            raise UsageError(f"option '{item}' does not name its method; write METHOD.KEY=VALUE, "
                             f"METHOD one of {', '.join(labels)}")
    return out
