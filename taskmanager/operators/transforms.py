"""Stateless operators: PySpark bodies applied to each batch's DataFrame.
Consecutive bodies compose lazily, so a chain costs one Spark job."""

from __future__ import annotations

from taskmanager.spark_engine import Batch


class BodyError(TypeError):
    pass


class SparkBody:
    def __init__(self, kind: str, payload: dict, name: str):
        self.kind, self.name = kind, name
        self.body = payload.get("body")
        self.columns = payload.get("columns")

    def process(self, batch: Batch) -> Batch:
        from pyspark.sql import Column, DataFrame
        df = batch.dataframe()
        if self.kind == "select":
            out = df.selectExpr(*self.columns)
        elif self.kind == "filter" and isinstance(self.body, str):
            out = df.filter(self.body)
        else:
            out = self.body(df)
            if self.kind == "filter" and isinstance(out, Column):
                out = df.filter(out)
        if not isinstance(out, DataFrame):
            raise BodyError(f"{self.kind} body of {self.name!r} returned {type(out).__name__}; "
                            "it must return a pyspark DataFrame" + (" or a boolean Column" if self.kind == "filter" else ""))
        return Batch(batch.engine, df=out)

    def end_input(self) -> Batch | None:
        return None
