"""The one Markdown writer of the benchmark reports (bench/README.md "Harness"): a section of
bench/RESULTS.md is `section(...)` of blocks, each block a list of lines made by `table`,
`bullets` or `paragraph`. Pure: no clock but the section's heading time, no I/O.

A table's cells are rendered by `cell`: None as an em dash, floats with `spec`, anything else by
`str`; a `|` inside a cell is escaped so that a configuration label or an error text cannot break
the table.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

DASH = "—"


def cell(value: Any, spec: str = ".2f") -> str:
    """One table cell: None -> "—", a float by `spec`, anything else by str(); `|` escaped and line
    breaks folded to spaces (a cell is one line)."""
    if value is None:
        return DASH
    text = format(value, spec) if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "", spec: str = ".2f") -> list[str]:
    """A Markdown table: `header`, its rule and one line per row. `align` gives a column's
    alignment per character ("l", "r", "c"; empty or shorter: the rest unaligned, `---`). A row
    with fewer cells than the header is padded with empty cells; one with more raises ValueError
    (a report bug, not a run's)."""
    if not header:
        raise ValueError("a table needs at least one column")
    width = len(header)
    rules = {"l": ":---", "r": "---:", "c": ":---:"}
    if any(a not in rules for a in align):
        raise ValueError(f"alignment {align!r}: use l, r or c per column")
    lines = [_line(cell(h) for h in header), _line(rules.get(a, "---") for a in align.ljust(width, "-")[:width])]
    for row in rows:
        cells = [cell(v, spec) for v in row]
        if len(cells) > width:
            raise ValueError(f"a row of {len(cells)} cells in a table of {width} columns: {cells}")
        lines.append(_line(cells + [""] * (width - len(cells))))
    return lines


def _line(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def bullets(items: Iterable[Any]) -> list[str]:
    """A bulleted list, one `- ` line per item (an item's line breaks folded)."""
    return [f"- {str(i).replace(chr(10), ' ')}" for i in items]


def paragraph(*parts: str) -> list[str]:
    """One paragraph: `parts` joined by spaces, as one line (Markdown wraps it)."""
    return [" ".join(p.strip() for p in parts if p.strip())]


def heading(text: str, level: int = 3) -> list[str]:
    return [f"{'#' * level} {text}"]


def section_head(title: str, command: str, facts: dict[str, Any], when: float | None = None) -> list[str]:
    """A section's first lines: `## <UTC time> — title`, the command with its commit, the machine
    (`facts`: bench_common.machine_facts())."""
    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(when))
    return [
        f"## {stamp} UTC — {title}",
        "",
        f"Command: `{command}` at commit {facts['commit']}",
        "",
        f"Machine: {facts['cores']} cores ({facts['cpu']}), {facts['ram']} RAM, Python {facts['python']}, "
        f"{facts['java']}, pyspark {facts['pyspark']}, load average at start {facts['load']}.",
        "",
    ]


def notes_lines(items: Sequence[Any]) -> list[str]:
    """A section's closing "Notes:" list (no lines without notes)."""
    return ["Notes:", "", *bullets(items), ""] if items else []


def section(
    title: str,
    command: str,
    facts: dict[str, Any],
    blocks: Iterable[Sequence[str]],
    notes_: Sequence[Any] = (),
    when: float | None = None,
) -> str:
    """A whole section of bench/RESULTS.md: its head, each non-empty block followed by a blank line,
    then the notes. Ends with one newline."""
    lines = section_head(title, command, facts, when)
    for block in blocks:
        if block:
            lines += [*block, ""]
    lines += notes_lines(notes_)
    return "\n".join(lines).rstrip("\n") + "\n"
