"""Sinks a job writes to."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class FileSink:
    """Writes rows as comma-separated lines (no header) under `path`.

    Files being written are hidden (names start with '.'); a part file becomes
    visible as `part-<subtask>-<n>.csv` by an atomic rename once committed.
    `columns` picks and orders the written columns (default: all but internal ones).
    """

    path: str
    columns: tuple[str, ...] | None = None

    def payload(self) -> dict[str, Any]:
        return {"path": self.path, "columns": list(self.columns) if self.columns else None}
