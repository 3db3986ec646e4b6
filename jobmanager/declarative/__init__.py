"""Jobs without Python: a DeclarativeJob (proto/sluice/v1/declarative.proto) checked and made
into the JobGraph the Python API would build (translate.py), with its SQL expressions checked
against the stream's columns without Spark (expressions.py). See docs/declarative-jobs.md."""
