"""The connector API (docs/connectors.md): write a source or a sink for any system.

`Source`, `SourceSplit`, `SplitEnumerator` (the built-ins `StaticSplitEnumerator` and
`DirectorySplitEnumerator`, which the JobManager runs), `SourceReader`; `Sink`,
`SinkWriter`, `Committer`, `DeliveryGuarantee`. Redis Streams: `sluice.connectors.redis_streams`.
"""

from sluice.connectors.api import (
    END,
    NOTHING_YET,
    Committer,
    ConnectorConfigError,
    DeliveryGuarantee,
    Poll,
    ReaderContext,
    Sink,
    SinkContext,
    SinkWriter,
    Source,
    SourceReader,
    SourceSplit,
    SplitEnumerator,
)
from sluice.connectors.enumerators import DirectorySplitEnumerator, StaticSplitEnumerator

__all__ = [
    "END",
    "NOTHING_YET",
    "Committer",
    "ConnectorConfigError",
    "DeliveryGuarantee",
    "DirectorySplitEnumerator",
    "Poll",
    "ReaderContext",
    "Sink",
    "SinkContext",
    "SinkWriter",
    "Source",
    "SourceReader",
    "SourceSplit",
    "SplitEnumerator",
    "StaticSplitEnumerator",
]
