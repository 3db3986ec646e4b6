"""Reading a file sink's committed output: the update stream, or the last value per key.

A `FileSink` (sluice/api/connectors.py) writes headerless comma-separated lines into
parts that become visible when they commit, named so that file-name order is commit
order (`FileSinkWriter.committed_name`, taskmanager/operators/sinks.py). So the committed
update stream of a job is every visible file of its output directory (names starting with
'.' or '_' are in progress, pending or not data) in file-name order, line by line, and a
key's final value is its last line. `sluice output` (sluice/cli/main.py) prints what
`read_output` returns.

pandas is imported here, not in `sluice`: `sluice.read_output` loads this module on first use.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from sluice.storage import list_files, resolve


def committed_parts(path: str) -> list[str]:
    """The visible files directly under `path` (a directory or pyarrow.fs URI), in name order."""
    return list_files(path, what="output")


def _names(value: str | Sequence[str] | None, what: str) -> list[str] | None:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else list(value)
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"{what}: one or more distinct column names, got {value!r}")
    return names


def read_output(
    path: str,
    final: bool = False,
    key: str | Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    dtype: Any = None,
) -> Any:
    """A file sink's committed output under `path` as a pandas DataFrame.

    `final=False`: every committed line, in commit order (the update stream).
    `final=True`: the last line of each key (the key's latest committed value), sorted
    by the key. `key`: the key column name(s), default the first column. `columns`:
    names for the columns (the files have no header; default `_c0`, `_c1`, ... as Spark
    names headerless CSV columns); there must be as many as fields per line.
    `dtype`: passed to `pandas.read_csv` (e.g. `str` keeps every value's text as written);
    default: inferred over all parts at once, with nullable integer types. An empty field
    is a null.
    """
    import pandas as pd

    names = _names(columns, "columns")
    keys = _names(key, "key")
    fs, _ = resolve(path)
    data = bytearray()
    for part in committed_parts(path):
        with fs.open_input_stream(part) as f:
            chunk = f.read()
        data += chunk
        if chunk and not chunk.endswith(b"\n"):
            data += b"\n"
    if data:
        frame = pd.read_csv(
            io.BytesIO(bytes(data)),
            header=None,
            dtype=dtype,
            keep_default_na=False,
            na_values=[""],
            dtype_backend="numpy_nullable",
        )
        if names is not None and len(names) != frame.shape[1]:
            raise ValueError(
                f"the committed lines under {path!r} have {frame.shape[1]} fields; "
                f"columns names {len(names)}: {', '.join(names)}"
            )
        frame.columns = names or [f"_c{i}" for i in range(frame.shape[1])]
    else:
        frame = pd.DataFrame({name: pd.Series(dtype="object") for name in names or []})
    if not final:
        return frame
    if frame.shape[1] == 0:
        return frame
    keys = keys or [str(frame.columns[0])]
    if missing := [k for k in keys if k not in frame.columns]:
        raise ValueError(f"key: no column {', '.join(missing)}; the columns are {', '.join(map(str, frame.columns))}")
    last = frame.drop_duplicates(subset=keys, keep="last")
    try:
        last = last.sort_values(keys, kind="stable")
    except TypeError:
        pass  # values of mixed types: keep the order of the last lines
    return last.reset_index(drop=True)
