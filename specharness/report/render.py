"""Writing a report: Markdown and LaTeX tables, PNG and PDF figures, report.md and report.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..results import check_folder
from .sections import Figure, Note, Section, Table


def tex(s: str) -> str:
    """LaTeX for a cell or caption; '' (an empty option value in a label) stays two straight quotes,
    not TeX's closing double quote."""
    for a, b in (("\\", "\\textbackslash{}"), ("''", "\\textquotesingle\\textquotesingle{}"), ("_", "\\_"),
                 ("%", "\\%"), ("&", "\\&"), ("#", "\\#"), ("×", "$\\times$"), ("†", "$^\\dagger$"),
                 ("η", "$\\eta$"), ("γ", "$\\gamma$")):
        s = s.replace(a, b)
    return s


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def latex_table(header: list[str], rows: list[list[str]], caption: str, label: str,
                group_header: list[tuple[str, int]] | None = None) -> str:
    cols = "l" + "c" * (len(header) - 1)
    out = ["\\begin{table}[t]", "\\centering", "\\small", f"\\begin{{tabular}}{{{cols}}}", "\\toprule"]
    if group_header:
        out.append(" & ".join(f"\\multicolumn{{{n}}}{{c}}{{{tex(t)}}}" if n > 1 else tex(t)
                              for t, n in group_header) + " \\\\")
        start = 1
        rules = []
        for t, n in group_header:
            if n > 1 and t:
                rules.append(f"\\cmidrule(lr){{{start}-{start + n - 1}}}")
            start += n
        out.append(" ".join(rules))
    out.append(" & ".join(tex(h) for h in header) + " \\\\")
    out.append("\\midrule")
    out += [" & ".join(tex(c) for c in r) + " \\\\" for r in rows]
    out += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{tex(caption)}}}", f"\\label{{{label}}}",
            "\\end{table}"]
    return "\n".join(out) + "\n"


class Writer:
    """Writes sections into one directory and remembers what went where, for report.md/.json."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.made: list[str] = []
        self.sections: list[str] = []  # Markdown of report.md's "Tables and figures"
        self.notes: list[str] = []
        self.data: dict[str, Any] = {}
        check_folder(out)  # made once the inputs are read: a refused report leaves no folder

    def write(self, name: str, text: str) -> None:
        (self.out / name).write_text(text)
        self.made.append(name)

    def add(self, section: Section) -> None:
        if isinstance(section, Note):
            self.notes.append(section.text)
            print(f"note: {section.text}")
        elif isinstance(section, Table):
            md = f"**{section.title}** {section.caption}\n\n" + markdown_table(section.md_header or section.header,
                                                                              section.rows)
            self.write(f"{section.name}.md", md)
            if section.latex:
                self.write(f"{section.name}.tex", latex_table(section.header, section.rows, section.caption,
                                                              section.label or f"tab:{section.name}",
                                                              section.group_header))
            self.sections.append(md)
            if section.data is not None:
                self.data[section.name] = section.data
        elif isinstance(section, Figure):
            import matplotlib.pyplot as plt
            for ext in ("png", "pdf"):
                section.figure.savefig(self.out / f"{section.name}.{ext}", dpi=150, bbox_inches="tight")
                self.made.append(f"{section.name}.{ext}")
            plt.close(section.figure)
            self.sections.append(f"![{section.name}]({section.name}.png)\n")
            if section.data is not None:
                self.data[section.key or section.name] = section.data

    def finish(self, head: list[str], inputs: list[str]) -> None:
        """report.md (definitions, inputs, every section, what was skipped) and report.json."""
        text = [*head, "## Tables and figures\n", *[s + "\n" for s in self.sections]]
        if self.notes:
            text += ["## Skipped\n", "\n".join(f"- {n}" for n in self.notes) + "\n"]
        self.write("report.md", "\n".join(text))
        self.write("report.json", json.dumps({"inputs": inputs, "notes": self.notes, **self.data}, indent=1,
                                             default=str))
