"""The generated parts of the documentation: the option tables, from the two option tables
(sluice/process_options.py OPTIONS, sluice/job_options.py JOB_OPTIONS), and the pure cores,
enums and operator kinds of docs/architecture.md (sluice/architecture.py).

A Markdown file holds a generated block between two marker lines:

    <!-- BEGIN GENERATED process-options: make docs-config -->
    | key | ... |
    <!-- END GENERATED process-options -->

    python -m sluice.reference_docs README.md docs/configuration.md           # rewrite the blocks
    python -m sluice.reference_docs --check README.md docs/configuration.md   # exit 1 when one is stale

`make docs-config` runs the first on README.md, docs/configuration.md and docs/architecture.md;
tests/unit/test_job_options.py and tests/unit/test_architecture_doc.py the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence

from sluice import architecture, config, job_options

BLOCKS: dict[str, Callable[[], str]] = {
    "process-options": config.reference,
    "job-options": job_options.reference,
    "pure-cores": architecture.pure_cores_reference,
    "enums": architecture.enums_reference,
    "operator-kinds": architecture.operator_kinds_reference,
}
REGENERATE = "make docs-config"
_BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED (?P<name>[a-z-]+)[^\n]*-->\n)(?P<body>.*?)"
    r"(?P<end><!-- END GENERATED (?P=name) -->)",
    re.DOTALL,
)


def render(text: str) -> str:
    """`text` with every generated block rewritten from its table (ValueError for an unknown block name)."""

    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in BLOCKS:
            raise ValueError(f"unknown generated block {name!r}; known: {', '.join(BLOCKS)}")
        return f"{m.group('begin')}{BLOCKS[name]()}\n{m.group('end')}"

    return _BLOCK.sub(block, text)


def blocks_in(text: str) -> list[str]:
    """Names of the generated blocks of `text`, in order."""
    return [m.group("name") for m in _BLOCK.finditer(text)]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sluice.reference_docs", description="Regenerate the generated tables in Markdown files."
    )
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a table is stale")
    args = ap.parse_args(argv)
    stale = []
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not blocks_in(text):
            print(f"{path}: no generated block", file=sys.stderr)
            return 2
        new = render(text)
        if new != text:
            stale.append(path)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    if args.check and stale:
        print(f"stale generated tables in {', '.join(stale)}: run `{REGENERATE}`", file=sys.stderr)
        return 1
    for path in stale:
        print(f"regenerated the generated tables in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
