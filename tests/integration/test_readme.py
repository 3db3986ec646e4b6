"""README.md works when followed literally: every ```bash block runs as written, in the
page's order, each in a fresh `bash -e` and all from one directory that looks like a clone
after `make demo` (links to the repository's files and its `.venv`, no `.sluice`), with the
`.venv` not on PATH — the blocks activate it themselves — against the cluster the blocks
start and stop. Whatever happens, a cluster the blocks left running is stopped.

The substitutions, the only ones: `/tmp/` becomes this test's temporary directory (the
blocks' data and output paths). A block whose first line is `# readme-test: skip (why)` is
not run; keep those few (today: `make demo` / `make test`, which this test is a part of).
Every fenced block names its language (`bash` for commands to run, `text` for synopses and
output, `python`), so a command block cannot escape this test by having no label.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from harness import REPO, LocalCluster

from sluice.cluster_file import ClusterFile

pytestmark = pytest.mark.integration

README = os.path.join(REPO, "README.md")
SKIP = re.compile(r"^# readme-test: skip \(.+\)$")
FENCE = re.compile(r"^```(\S*)\s*$")
NOT_LINKED = {".sluice", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def fenced_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line number, language, body) of every fenced block."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, language, body = i + 1, m.group(1), []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        blocks.append((start, language, "\n".join(body) + "\n"))
        i += 1
    return blocks


def bash_blocks() -> list[tuple[int, str]]:
    with open(README) as f:
        return [(line, body) for line, language, body in fenced_blocks(f.read()) if language == "bash"]


def test_every_block_names_its_language():
    with open(README) as f:
        unlabeled = [line for line, language, _ in fenced_blocks(f.read()) if not language]
    assert not unlabeled, f"README.md: fenced blocks without a language (bash, text, python) at lines {unlabeled}"


def test_skipped_blocks_say_why_and_stay_few():
    skipped = [line for line, body in bash_blocks() if body.startswith("# readme-test: skip")]
    for line, body in bash_blocks():
        if body.startswith("# readme-test: skip"):
            assert SKIP.match(body.splitlines()[0]), f"README.md:{line}: `# readme-test: skip (the reason)`"
    assert len(skipped) <= 1, f"README.md: more blocks skipped than make demo / make test: lines {skipped}"
    assert len(bash_blocks()) > len(skipped), "README.md has no bash block this test runs"


def clone(tmp_path) -> str:
    """A directory like a clone after `make demo`: the repository's files, linked."""
    work = tmp_path / "clone"
    work.mkdir()
    for name in os.listdir(REPO):
        if name not in NOT_LINKED:
            os.symlink(os.path.join(REPO, name), work / name)
    return str(work)


def shell_env() -> dict[str, str]:
    """The caller's environment without an active venv: as a fresh terminal has it."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SLUICE_CLUSTER_DIR")}
    venv_bins = {os.path.join(REPO, ".venv", "bin"), os.path.dirname(sys.executable)}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p not in venv_bins)
    return env


@pytest.mark.timeout(1200)  # every block in turn, several of them starting a cluster of their own
def test_readme_command_blocks_run_as_written(tmp_path):
    work, scratch = clone(tmp_path), tmp_path / "tmp"
    scratch.mkdir()
    ran = 0
    try:
        for line, body in bash_blocks():
            if body.startswith("# readme-test: skip"):
                continue
            script = body.replace("/tmp/", f"{scratch}/")
            log = tmp_path / f"block-{line}.log"
            with open(log, "w") as out:
                proc = subprocess.run(
                    ["bash", "-e", "-c", script],
                    cwd=work,
                    env=shell_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=900,
                )
            assert proc.returncode == 0, (
                f"README.md:{line}: the block exited {proc.returncode}:\n{script}\n--- its output:\n{log.read_text()}"
            )
            ran += 1
    finally:
        stop_left_over_cluster(os.path.join(work, ".sluice"))
    assert ran >= 1


def stop_left_over_cluster(cluster_dir: str) -> None:
    """`sluice cluster stop` and kill what survives, if a block left a cluster running."""
    if not os.path.exists(ClusterFile.path(cluster_dir)):
        return
    cluster = LocalCluster(cluster_dir)
    cluster.refresh()
    cluster.stop()
