"""Running a job file (`sluice run`) where no SparkSession exists.

A job file runs on the client: it builds the job graph and submits it, and
its functions run later, inside Spark on the TaskManagers. pyspark parses a
DDL type string ("long", "array<string>") through the JVM of an active
session, so `@pandas_udf("long")` in a job file fails at definition with
SESSION_OR_CONTEXT_NOT_EXISTS, while `@pandas_udf(LongType())` works.

`ddl_types_without_session()`, which `sluice run` wraps around the job file,
lets the return types of `pandas_udf` and `udf` be DDL strings: while no
SparkContext is active, pyspark's parser in `pyspark.sql.udf` is replaced by
`parse_type`, which reads the plain forms of Spark's type DDL in Python —
the atomic types, `decimal(p, s)`, `array<T>`, `map<K, V>`, `struct<a: T,
...>` and a top-level field list `a T, b T` (every element, value and field
nullable, as Spark's parser makes them). Any other form (char, varchar,
intervals, collations, NOT NULL, COMMENT) raises `NeedsSparkSession`, which
names the string and says to give a `DataType`. The parsed `DataType` is what
the UDF carries to the TaskManagers, so Spark never parses the string there.

`run_job_file` is what `sluice run` does with a job file: run it as
`__main__` under `ddl_types_without_session`, with the job file's directory
first on `sys.path`; modules imported from that directory (helpers next to
the job file) are pickled by value with the job's code (cloudpickle's
`register_pickle_by_value`), since the TaskManagers cannot import them; and a
job file that ends without calling `env.execute()` is an error
(`NothingSubmitted`), not a silent success.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructField


class NeedsSparkSession(ValueError):
    """A job file asked for something only a SparkSession can do; the message says what to write instead."""


class NothingSubmitted(RuntimeError):
    """A job file ran to its end without calling env.execute(): no job was submitted."""


def run_job_file(jobfile: str) -> None:
    """Run `jobfile` as `sluice run` does (module docstring); NothingSubmitted if it never called
    `env.execute()`. The execution context (sluice.api.environment.set_execution_context) is set."""
    from sluice.api import environment

    job_dir = os.path.dirname(os.path.abspath(jobfile))
    sys.path.insert(0, job_dir)
    environment._context["before_submit"] = lambda: pickle_by_value_under(job_dir)
    before = environment._context.get("executions", 0)
    with ddl_types_without_session():  # @pandas_udf("long") in the job file
        runpy.run_path(jobfile, run_name="__main__")
    if environment._context.get("executions", 0) == before:
        raise NothingSubmitted(
            f"{jobfile} ran to its end without calling env.execute(): no job was submitted. "
            'Build the job with a StreamExecutionEnvironment and end the file with env.execute("name")'
        )


def pickle_by_value_under(directory: str) -> list[str]:
    """Have cloudpickle pickle by value every imported module whose file is under `directory`
    (the job file's helpers), except installed packages (editable ones too: a job file at the
    root of a project's checkout); their names."""
    import importlib.metadata

    import cloudpickle

    root = os.path.join(os.path.abspath(directory), "")
    candidates = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name == "__main__" or not path or "." in name:  # a package takes its submodules
            continue
        path = os.path.abspath(path)
        if path.startswith(root) and "site-packages" not in path:
            candidates.append((name, module))
    if not candidates:  # the common case; listing the installed packages costs ~0.2 s of every `sluice run`
        return []
    installed = importlib.metadata.packages_distributions()
    names = []
    for name, module in candidates:
        if name not in installed:
            cloudpickle.register_pickle_by_value(module)
            names.append(name)
    return sorted(names)


def message_for_type(ddl: str, kind: str = "pandas_udf") -> str:
    return (
        f'{kind}("{ddl}"): give the return type as a DataType (from pyspark.sql.types, e.g. LongType() or '
        "StructType([...])), the job file runs without a SparkSession; without one only the plain type strings "
        "are read (atomic types, decimal(p, s), array<...>, map<...>, struct<...>, 'a long, b string')"
    )


def explain(exc: BaseException) -> str | None:
    """What to tell the user for an error raised by a job file, if it is a missing SparkSession."""
    if isinstance(exc, NeedsSparkSession):
        return str(exc)
    condition = getattr(exc, "getCondition", None)
    if callable(condition) and condition() == "SESSION_OR_CONTEXT_NOT_EXISTS":
        return (
            "the job file needs a SparkSession here, but it runs on the client, where none exists: "
            "build Spark objects (columns, UDFs with DDL return types other than the plain ones, "
            "schemas from DDL) inside the functions you give map, filter and the other operators, "
            f"which run on the TaskManagers ({exc})"
        )
    return None


@contextlib.contextmanager
def ddl_types_without_session() -> Iterator[None]:
    """While active, UDF return types given as DDL strings parse without a SparkSession. pyspark
    is patched when the job file imports it (a hook on `sys.meta_path`), so a job file that does
    not use pyspark does not pay its import (~0.2 s of every `sluice run`)."""
    undo: list[Callable[[], None]] = []

    def patch(udf_module: Any) -> None:
        from pyspark import SparkContext

        original = udf_module._parse_datatype_string

        def parse(s: str) -> DataType:  # pyspark's signature
            if SparkContext._active_spark_context is not None:  # a session exists: the JVM parses
                return original(s)
            try:
                return parse_type(s)
            except NeedsSparkSession:
                called_from = {frame.filename.replace("\\", "/") for frame in traceback.extract_stack()}
                kind = (
                    "pandas_udf" if any(f.endswith("pyspark/sql/pandas/functions.py") for f in called_from) else "udf"
                )
                raise NeedsSparkSession(message_for_type(s, kind)) from None

        udf_module._parse_datatype_string = parse  # the name UserDefinedFunction.returnType calls
        undo.append(lambda: setattr(udf_module, "_parse_datatype_string", original))

    hook = None
    if UDF_MODULE in sys.modules:
        patch(sys.modules[UDF_MODULE])
    else:
        hook = _AfterImport(UDF_MODULE, patch)
        sys.meta_path.insert(0, hook)
    try:
        yield
    finally:
        if hook is not None and hook in sys.meta_path:
            sys.meta_path.remove(hook)
        for step in undo:
            step()


UDF_MODULE = "pyspark.sql.udf"


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that finds nothing itself: when `name` is imported, the other finders load it and
    `then(module)` runs once it has executed; the finder then leaves `sys.meta_path`."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(
        self,
        fullname: str,
        path: Any,  # noqa: ARG002 - the finder protocol's signature
        target: Any = None,  # noqa: ARG002 - the finder protocol's signature
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, then: Callable[[Any], None]) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        self.then(module)


# -- the DDL -------------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)+`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


def _atomic() -> dict[str, Callable[[], DataType]]:
    from pyspark.sql import types as t

    return {
        "boolean": t.BooleanType,
        "tinyint": t.ByteType,
        "byte": t.ByteType,
        "smallint": t.ShortType,
        "short": t.ShortType,
        "int": t.IntegerType,
        "integer": t.IntegerType,
        "bigint": t.LongType,
        "long": t.LongType,
        "float": t.FloatType,
        "real": t.FloatType,
        "double": t.DoubleType,
        "date": t.DateType,
        "timestamp": t.TimestampType,
        "timestamp_ltz": t.TimestampType,
        "timestamp_ntz": t.TimestampNTZType,
        "string": t.StringType,
        "binary": t.BinaryType,
        "void": t.NullType,
    }


class _Unsupported(Exception):
    pass


class _Parser:
    def __init__(self, ddl: str):
        self.tokens: list[str] = []
        pos, text = 0, ddl.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise _Unsupported
            self.tokens.append(next(g for g in m.groups() if g is not None))
            pos = m.end()
        self.i = 0
        self.atomic = _atomic()

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.lower() != expected):
            raise _Unsupported
        self.i += 1
        return token

    def done(self) -> bool:
        return self.i == len(self.tokens)

    def data_type(self) -> DataType:
        from pyspark.sql import types as t

        name = self.take().lower()
        if name in self.atomic:
            return self.atomic[name]()
        if name in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = self.number()
                if self.peek() == ",":
                    self.take(",")
                    scale = self.number()
                self.take(")")
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise _Unsupported
            return t.DecimalType(precision, scale)
        if name == "array":
            self.take("<")
            element = self.data_type()
            self.take(">")
            return t.ArrayType(element, True)
        if name == "map":
            self.take("<")
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            return t.MapType(key, value, True)
        if name == "struct":
            self.take("<")
            fields = [] if self.peek() == ">" else self.fields()
            self.take(">")
            return t.StructType(fields)
        raise _Unsupported

    def number(self) -> int:
        token = self.take()
        if not token.isdigit():
            raise _Unsupported
        return int(token)

    def fields(self) -> list[StructField]:
        from pyspark.sql import types as t

        out = []
        while True:
            name = self.take()
            if name[0] == "`":
                name = name[1:-1].replace("``", "`")
            elif not (name[0].isalpha() or name[0] == "_"):
                raise _Unsupported
            if self.peek() == ":":
                self.take(":")
            out.append(t.StructField(name, self.data_type(), True))
            if self.peek() != ",":
                return out
            self.take(",")


def parse_type(ddl: str) -> DataType:
    """A DDL type string as Spark's parser reads it, for the forms the module docstring lists:
    a type ("long", "array<string>"), else a field list ("a long, b string") as a StructType."""
    from pyspark.sql import types as t

    for whole in (_Parser.data_type, _Parser.fields):
        try:
            parser = _Parser(ddl)
            result = whole(parser)
            if parser.done():
                return t.StructType(result) if isinstance(result, list) else result
        except _Unsupported:
            pass
    raise NeedsSparkSession(message_for_type(ddl))


def parse_options(pairs: list[str]) -> dict[str, str]:
    """`sluice run -D KEY=VALUE ...` as job options, each checked (SluiceError says which is wrong)."""
    from sluice import job_options
    from sluice.cli.cluster import ClusterError
    from sluice.cli.cluster import parse_options as key_value_pairs
    from sluice.client import SluiceError

    try:
        options = key_value_pairs(pairs, example="execution.checkpointing.interval=5s")
    except ClusterError as exc:
        raise SluiceError(str(exc)) from None
    for key, value in options.items():
        try:
            job_options.check_option(key, value)
        except job_options.JobConfigError as exc:
            raise SluiceError(f"-D {f'{key}={value}'!r}: {exc}") from None
    return options
