"""Stateless operators: PySpark bodies applied to each batch's DataFrame.
Consecutive bodies compose lazily, so a chain costs one Spark job."""

from __future__ import annotations

from typing import Any, Self

from sluice.graph import OperatorKind
from taskmanager.operators.base import Operator, OperatorContext, Payload
from taskmanager.spark_engine import Batch


class BodyError(TypeError):
    pass


class SparkBody(Operator):
    """map, filter, flat_map (a body `DataFrame -> DataFrame`; a filter may also be a SQL
    condition or return a boolean Column) and select (SQL expressions)."""

    def __init__(self, kind: OperatorKind, payload: Payload, name: str) -> None:
        self.kind, self.name = kind, name
        self.body: Any = payload.get("body")
        self.columns: list[str] = payload.get("columns") or []

    @classmethod
    def create(cls, kind: OperatorKind, payload: Payload, ctx: OperatorContext) -> Self:
        return cls(kind, payload, ctx.name)

    def process(self, batch: Batch) -> Batch:
        from pyspark.sql import Column, DataFrame

        df = batch.dataframe()
        is_filter = self.kind == OperatorKind.FILTER
        if self.kind == OperatorKind.SELECT:
            out = df.selectExpr(*self.columns)
        elif is_filter and isinstance(self.body, str):
            out = df.filter(self.body)
        else:
            out = self.body(df)
            if is_filter and isinstance(out, Column):
                out = df.filter(out)
        if not isinstance(out, DataFrame):
            raise BodyError(
                f"{self.kind} body of {self.name!r} returned {type(out).__name__}; "
                "it must return a pyspark DataFrame" + (" or a boolean Column" if is_filter else "")
            )
        return Batch(batch.engine, df=out)
