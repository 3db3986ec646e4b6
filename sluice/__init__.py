"""Sluice: Flink-style stream processing with PySpark task bodies.

The job API is `sluice.api`. `sluice.read_output(path, final=True)` reads a file sink's
committed output into a pandas DataFrame (sluice/output.py, imported on first use so that
importing `sluice` stays light).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.output import read_output

__all__ = ["read_output"]


def __getattr__(name: str) -> Any:
    if name == "read_output":
        from sluice.output import read_output

        return read_output
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
