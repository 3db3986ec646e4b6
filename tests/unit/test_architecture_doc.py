"""docs/architecture.md kept true by the code.

* The code map names every module of the product packages (sluice/, jobmanager/, taskmanager/;
  not the generated `*_pb2*` stubs nor `__init__.py`) in the row of its own folder, and every
  module it names exists.
* Its generated blocks (pure cores, enums, operator kinds: sluice/architecture.py) are fresh
  (`make docs-config` rewrites them).
* mypy's strict override in pyproject.toml covers every pure core.
* It stays a map: at most MAX_CHARACTERS; feature detail lives in the feature docs it links,
  and every link between the docs (docs/, README.md, CONTRIBUTING.md) resolves, sections too.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest

from sluice import architecture, reference_docs

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
MAX_CHARACTERS = 30_000
GENERATED_BLOCKS = ("pure-cores", "enums", "operator-kinds")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def code_map_rows(text: str) -> dict[str, str]:
    """folder (`sluice/cli/`) -> the text of its row in the table of the "Code map" section."""
    section = text.split("\n## Code map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = line.split(" | ")
        for folder in re.findall(r"`([^`]+/)`", cells[0]):
            rows[folder] = line
    return rows


def _named_files(row: str) -> set[str]:
    """The `.py` names in a row, as written (`task.py`, `sluice/cli/processes.py`)."""
    return set(re.findall(r"`([\w/]+\.py)`", row))


def _modules() -> list[str]:
    return [m for m in architecture.product_modules() if not m.endswith("/__init__.py")]


def test_the_code_map_names_every_module_in_its_folders_row():
    rows = code_map_rows(_text())
    missing = []
    for module in _modules():
        folder, _, name = module.rpartition("/")
        row = rows.get(folder + "/")
        if row is None:
            missing.append(f"{module} (no row for {folder}/)")
        elif f"`{name}`" not in row and f"`{module}`" not in row:
            missing.append(module)
    assert not missing, (
        "docs/architecture.md's code map does not name these modules; add each to the row of its "
        "folder (what it holds, in a few words) or a row for a new folder:\n  " + "\n  ".join(missing)
    )


def test_every_module_the_code_map_names_exists():
    gone = []
    for folder, row in code_map_rows(_text()).items():
        for name in _named_files(row):
            if not ((ROOT / folder / name).exists() or (ROOT / name).exists()):
                gone.append(f"{name} (row {folder})")
    assert not gone, "docs/architecture.md's code map names files that do not exist:\n  " + "\n  ".join(sorted(gone))


def test_the_code_map_rows_are_folders_that_exist():
    gone = [folder for folder in code_map_rows(_text()) if not (ROOT / folder).is_dir()]
    assert not gone, f"code map rows for folders that do not exist: {gone}"


def test_the_code_map_check_reads_rows_and_names():
    text = (
        "# Doc\n## Code map\n\n| path | what |\n|---|---|\n| `a/b/` | `x.py` (one), `c/d.py` |\n"
        "\n## Next\n| `e/` | `y.py` |\n"
    )
    rows = code_map_rows(text)
    assert list(rows) == ["a/b/"]
    assert _named_files(rows["a/b/"]) == {"x.py", "c/d.py"}


@pytest.mark.parametrize("name", GENERATED_BLOCKS)
def test_the_generated_block_is_in_the_map(name):
    assert name in reference_docs.blocks_in(_text()), f"docs/architecture.md lost its generated {name} block"


def test_the_generated_blocks_are_fresh():
    text = _text()
    assert reference_docs.render(text) == text, (
        "docs/architecture.md's generated tables (pure cores, enums, operator kinds) are stale: "
        f"run `{reference_docs.REGENERATE}`"
    )


def test_mypy_checks_every_pure_core_strictly():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    strict = next(o for o in config["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs"))
    patterns = strict["module"]
    loose = [m for m in architecture.PURE_CORES if not any(fnmatch.fnmatchcase(m, p) for p in patterns)]
    assert not loose, (
        "pure cores missing from the strict [[tool.mypy.overrides]] of pyproject.toml "
        f"(sluice/architecture.py PURE_CORES is the list): {loose}"
    )


def test_every_pure_core_exists():
    gone = [m for m in architecture.PURE_CORES if not (ROOT / architecture.module_file(m)).exists()]
    assert not gone, f"PURE_CORES names modules that do not exist: {gone}"


def test_the_map_stays_a_map():
    size = len(_text())
    assert size <= MAX_CHARACTERS, (
        f"docs/architecture.md has {size} characters, more than {MAX_CHARACTERS}: move feature "
        "detail into the feature's own doc under docs/ and link it"
    )


DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")) + ["README.md", "CONTRIBUTING.md"]


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them (outside code blocks)."""
    out, in_code = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.*)", line)):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_anchors_are_githubs():
    assert anchors("# The path of a job\n```\n# not a heading\n```\n### `JobManager`: clients → it") == {
        "the-path-of-a-job",
        "jobmanager-clients--it",
    }


@pytest.mark.parametrize("doc", DOCS)
def test_links_between_docs_resolve(doc):
    """Moving a section out of architecture.md into a feature doc must not leave a link behind."""
    path = ROOT / doc
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        linked = path.parent / target if target else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc} links to files or sections that do not exist: {sorted(set(broken))}"
