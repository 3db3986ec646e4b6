from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionRequest(_message.Message):
    __slots__ = ("partition_id", "subpartition", "initial_credit")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    INITIAL_CREDIT_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    subpartition: int
    initial_credit: int
    def __init__(self, partition_id: _Optional[str] = ..., subpartition: _Optional[int] = ..., initial_credit: _Optional[int] = ...) -> None: ...

class ConsumerMessage(_message.Message):
    __slots__ = ("request", "credit")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    request: PartitionRequest
    credit: int
    def __init__(self, request: _Optional[_Union[PartitionRequest, _Mapping]] = ..., credit: _Optional[int] = ...) -> None: ...

class EndOfPartition(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Barrier(_message.Message):
    __slots__ = ("checkpoint_id", "timestamp_ms")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    timestamp_ms: int
    def __init__(self, checkpoint_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class Watermark(_message.Message):
    __slots__ = ("timestamp_ms",)
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    def __init__(self, timestamp_ms: _Optional[int] = ...) -> None: ...

class StreamStatus(_message.Message):
    __slots__ = ("idle",)
    IDLE_FIELD_NUMBER: _ClassVar[int]
    idle: bool
    def __init__(self, idle: _Optional[bool] = ...) -> None: ...

class DataMessage(_message.Message):
    __slots__ = ("batch", "end", "barrier", "watermark", "status", "backlog")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    batch: bytes
    end: EndOfPartition
    barrier: Barrier
    watermark: Watermark
    status: StreamStatus
    backlog: int
    def __init__(self, batch: _Optional[bytes] = ..., end: _Optional[_Union[EndOfPartition, _Mapping]] = ..., barrier: _Optional[_Union[Barrier, _Mapping]] = ..., watermark: _Optional[_Union[Watermark, _Mapping]] = ..., status: _Optional[_Union[StreamStatus, _Mapping]] = ..., backlog: _Optional[int] = ...) -> None: ...
