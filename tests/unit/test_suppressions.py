"""Every lint or type-check suppression says why, on its own line: a bare
`# noqa: E731` or `# type: ignore[attr-defined]` hides a decision from the next
reader. ruff and mypy (run by `make lint`) check that the codes are real and
used; this test checks the reason is there."""

import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP_DIRS = {".venv", ".git", "build", ".sluice", "node_modules"}
# the suppression, its codes, then the reason: at least one word after a separator
SUPPRESSION = re.compile(r"#\s*(noqa|type:\s*ignore)\b(?P<rest>.*)$")
CODES = re.compile(r"^(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*|\[[a-z-]+(\s*,\s*[a-z-]+)*\])")


def _python_files() -> list[pathlib.Path]:
    return [p for p in ROOT.rglob("*.py") if not SKIP_DIRS & set(p.relative_to(ROOT).parts) and "_pb2" not in p.name]


def unexplained(line: str) -> bool:
    m = SUPPRESSION.search(line)
    if m is None:
        return False
    rest = m.group("rest")
    codes = CODES.match(rest)
    if codes is None:  # a blanket suppression without codes is never allowed
        return True
    reason = rest[codes.end() :].strip(" -—:#")
    return len(re.findall(r"[A-Za-z]{2,}", reason)) < 2


def test_the_check_itself():
    assert unexplained("x = 1  # noqa: E731")
    assert unexplained("x = 1  # noqa")
    assert unexplained("x = f()  # type: ignore")
    assert unexplained("x = f()  # type: ignore[attr-defined]")
    assert not unexplained("x = 1  # noqa: E731 — a named lambda reads better here")
    assert not unexplained("x = f()  # type: ignore[attr-defined]  # grpc stubs lack it")
    assert not unexplained("x = 1  # a plain comment")


def _comments(path: pathlib.Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    return [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]


def test_every_suppression_gives_a_reason():
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {comment}"
        for p in _python_files()
        for n, comment in _comments(p)
        if unexplained(comment)
    ]
    assert not bad, "suppressions without a reason (add one after the codes):\n" + "\n".join(bad)
