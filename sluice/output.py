"""Reading a file sink's committed output: the update stream, or the last value per key.

A `FileSink` (sluice/api/connectors.py) writes parts that become visible when they commit,
named so that file-name order is commit order (`FileSinkWriter.committed_name`,
taskmanager/operators/sinks.py), in one of four formats told by the part's extension
(docs/file-formats.md): `.csv` headerless comma-separated lines (any other extension is
read as CSV too, as before formats), `.jsonl` one JSON object per line, `.parquet` one
Parquet file, `.txt` one value per line (the column `value`). So the committed update
stream of a job is every visible file of its output directory (names starting with '.'
or '_' are in progress, pending or not data) in file-name order, row by row, and a key's
final value is its last row. `sluice output` (sluice/cli/main.py) prints what
`read_output` returns.

pandas is imported here, not in `sluice`: `sluice.read_output` loads this module on first use.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from typing import Any

from sluice.storage import list_files, resolve

# A committed part's format by its extension (the inverse of schema_inference.SINK_FORMATS)
FORMAT_OF_EXTENSION = {".jsonl": "json", ".parquet": "parquet", ".txt": "text"}  # anything else: csv


def part_format(name: str) -> str:
    """The format a committed part `name` was written in, from its extension."""
    return FORMAT_OF_EXTENSION.get(os.path.splitext(name)[1], "csv")


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
    """A file sink's committed output under `path` as a pandas DataFrame, in any format.

    `final=False`: every committed row, in commit order (the update stream).
    `final=True`: the last row of each key (the key's latest committed value), sorted
    by the key. `key`: the key column name(s), default the first column.
    `columns`: for csv, names for the columns (the files have no header; default `_c0`,
    `_c1`, ... as Spark names headerless CSV columns), as many as fields per line; for
    text, a name for the one column (default `value`); for json and parquet, whose rows
    name their columns, the columns to keep, in order (default: all, in the order written).
    `dtype`: csv, passed to `pandas.read_csv` (e.g. `str` keeps every value's text as
    written); other formats, the frame is cast to it (`str`: pandas' nullable string).
    Default: inferred (csv over all parts at once), with nullable integer types. An empty
    csv field is a null. A directory holding parts of several formats is an error.
    """
    names = _names(columns, "columns")
    keys = _names(key, "key")
    fs, _ = resolve(path)
    parts = committed_parts(path)
    formats = sorted({part_format(p) for p in parts})
    if len(formats) > 1:
        counts = ", ".join(f"{f}: {sum(part_format(p) == f for p in parts)}" for f in formats)
        raise ValueError(
            f"{path!r} holds committed parts of several formats ({counts}); give each file sink its own directory"
        )
    fmt = formats[0] if formats else "csv"
    if fmt == "csv":
        frame = _read_csv(fs, parts, path, names, dtype)
    elif fmt == "text":
        frame = _read_text(fs, parts, names)
    else:
        frame = _read_parquet(fs, parts) if fmt == "parquet" else _read_json(fs, parts)
        if names is not None:
            if missing := [n for n in names if n not in frame.columns]:
                raise ValueError(
                    f"columns: no column {', '.join(missing)} in the {fmt} parts under {path!r}; "
                    f"they have {', '.join(map(str, frame.columns)) or '(none)'}"
                )
            frame = frame[names]
        if dtype is not None:
            frame = frame.astype("string" if dtype is str else dtype)
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


def _read_csv(fs: Any, parts: list[str], path: str, names: list[str] | None, dtype: Any) -> Any:
    import pandas as pd

    data = bytearray()
    for part in parts:
        with fs.open_input_stream(part) as f:
            chunk = f.read()
        data += chunk
        if chunk and not chunk.endswith(b"\n"):
            data += b"\n"
    if not data:
        return pd.DataFrame({name: pd.Series(dtype="object") for name in names or []})
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
    return frame


def _read_text(fs: Any, parts: list[str], names: list[str] | None) -> Any:
    import pandas as pd

    if names is not None and len(names) != 1:
        raise ValueError(f"columns: text parts have one column (value), got {len(names)}: {', '.join(names)}")
    lines: list[str] = []
    for part in parts:
        with fs.open_input_stream(part) as f:
            lines += f.read().decode("utf-8", errors="replace").splitlines()
    return pd.DataFrame({(names or ["value"])[0]: pd.Series(lines, dtype="string")})


def _read_json(fs: Any, parts: list[str]) -> Any:
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for part in parts:
        with fs.open_input_stream(part) as f:
            for n, line in enumerate(f.read().decode("utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{part}, line {n}: not a JSON object ({exc})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{part}, line {n}: not a JSON object")
                rows.append(row)
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame.from_records(rows)
    # ints with nulls as nullable integers (not floats); numbers written as floats stay floats
    return frame.convert_dtypes(dtype_backend="numpy_nullable", convert_floating=False)


def _read_parquet(fs: Any, parts: list[str]) -> Any:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not parts:
        return pd.DataFrame()
    tables = []
    for part in parts:
        try:
            tables.append(pq.read_table(part, filesystem=fs))
        except (pa.ArrowException, OSError) as exc:
            raise ValueError(f"{part} is not a readable Parquet file ({exc})") from None
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"the Parquet parts have schemas that do not combine: {exc}") from None
    nullable = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
        pa.float32(): pd.Float32Dtype(),
        pa.float64(): pd.Float64Dtype(),
        pa.string(): pd.StringDtype(),
        pa.large_string(): pd.StringDtype(),
    }
    return table.to_pandas(types_mapper=nullable.get)
