"""What a report is made of: tables, figures and notes, built by pure functions from runs.

Builders (``tables.py``, ``figures.py``, and a method's own sections through the
``specharness_report_sections`` hook) return these; ``render.py`` writes them. A section that has
no data is a ``Note`` saying why it was skipped, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    """A table as Markdown (also a section of report.md) and LaTeX; its numbers go to report.json."""

    name: str  # file stem: NAME.md, NAME.tex
    title: str  # bold lead of the Markdown caption, e.g. "Table 1."
    caption: str
    header: list[str]
    rows: list[list[str]]
    data: dict[str, Any] | None = None
    md_header: list[str] | None = None  # a flat header for Markdown when LaTeX groups columns
    group_header: list[tuple[str, int]] | None = None  # LaTeX: (title, columns spanned) above the header
    label: str | None = None  # LaTeX label (default tab:NAME)
    latex: bool = True


@dataclass
class Figure:
    """A matplotlib figure saved as NAME.png and NAME.pdf; its plotted numbers go to report.json."""

    name: str
    figure: Any
    data: dict[str, Any] | None = field(default=None)
    key: str | None = None  # where ``data`` goes in report.json (default: name)


@dataclass
class Note:
    """Why something was skipped (printed, and listed at the end of report.md)."""

    text: str


Section = Table | Figure | Note
