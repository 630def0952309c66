"""The report as data (sections of paragraphs, tables and figures) and its summary.md rendering.

    doc = Document("rlrm report")
    section = doc.section("Runs")
    section.table(["run", "steps"], [["a", 10]])
    section.figure("curve_reward", "reward.png")
    doc.to_markdown()

The HTML report renders the same Document (see html.py), so summary.md and report.html always
show the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Table:
    headers: list[str]
    rows: list[list]
    digits: int = 4  # significant digits of floats under 100


@dataclass
class FigureRef:
    name: str  # figure name (file stem)
    file: str  # file name in the output folder
    embed: str = ""  # HTML for report.html (inline SVG or a data-URI <img>), when one is made


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)  # str (paragraph) | Table | FigureRef

    def text(self, paragraph: str) -> None:
        self.blocks.append(paragraph)

    def table(self, headers: list[str], rows: list[list], digits: int = 4) -> None:
        self.blocks.append(Table(list(headers), [list(r) for r in rows], digits))

    def figure(self, name: str, file: str, embed: str = "") -> FigureRef:
        ref = FigureRef(name, file, embed)
        self.blocks.append(ref)
        return ref


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def section(self, title: str) -> Section:
        section = Section(title)
        self.sections.append(section)
        return section

    def figures(self) -> list[FigureRef]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, FigureRef)]

    def to_markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for section in self.sections:
            out += [f"## {section.title}", ""]
            for block in section.blocks:
                if isinstance(block, Table):
                    out += _markdown_table(block) + [""]
                elif isinstance(block, FigureRef):
                    out += [f"![{block.name}]({block.file})", ""]
                else:
                    out += [block, ""]
        if self.notes:
            out += ["## Notes", ""] + [f"- {note}" for note in self.notes] + [""]
        return "\n".join(out)


def fmt(value, digits: int = 4) -> str:
    """A table cell: integers as is, floats to `digits` significant digits (1 decimal from 100), n/a for missing."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (hasattr(value, "dtype") and value.dtype.kind in "iu"):
        return str(int(value))
    if isinstance(value, float) or hasattr(value, "dtype"):
        value = float(value)
        if math.isnan(value):
            return "n/a"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == int(value) and abs(value) < 1e15:
            return str(int(value))
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.{digits}g}"
    return str(value)


def _markdown_table(table: Table) -> list[str]:
    def cell(value) -> str:
        return fmt(value, table.digits).replace("|", "\\|")

    lines = ["| " + " | ".join(table.headers) + " |", "|" + "|".join("---" for _ in table.headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return lines
