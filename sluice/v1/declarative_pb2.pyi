from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeclarativeJob(_message.Message):
    __slots__ = ("name", "parallelism", "config", "source", "steps", "sink")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    name: str
    parallelism: int
    config: _containers.ScalarMap[str, str]
    source: DeclarativeSource
    steps: _containers.RepeatedCompositeFieldContainer[DeclarativeStep]
    sink: DeclarativeSink
    def __init__(self, name: _Optional[str] = ..., parallelism: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ..., source: _Optional[_Union[DeclarativeSource, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[DeclarativeStep, _Mapping]]] = ..., sink: _Optional[_Union[DeclarativeSink, _Mapping]] = ...) -> None: ...

class SchemaField(_message.Message):
    __slots__ = ("name", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class DeclarativeSource(_message.Message):
    __slots__ = ("format", "path", "schema", "options", "suffix", "monitor_interval_ms", "on_error")
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    MONITOR_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    format: str
    path: str
    schema: _containers.RepeatedCompositeFieldContainer[SchemaField]
    options: _containers.ScalarMap[str, str]
    suffix: str
    monitor_interval_ms: int
    on_error: str
    def __init__(self, format: _Optional[str] = ..., path: _Optional[str] = ..., schema: _Optional[_Iterable[_Union[SchemaField, _Mapping]]] = ..., options: _Optional[_Mapping[str, str]] = ..., suffix: _Optional[str] = ..., monitor_interval_ms: _Optional[int] = ..., on_error: _Optional[str] = ...) -> None: ...

class DeclarativeStep(_message.Message):
    __slots__ = ("select", "filter", "key_by")
    SELECT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    KEY_BY_FIELD_NUMBER: _ClassVar[int]
    select: SelectStep
    filter: FilterStep
    key_by: KeyByStep
    def __init__(self, select: _Optional[_Union[SelectStep, _Mapping]] = ..., filter: _Optional[_Union[FilterStep, _Mapping]] = ..., key_by: _Optional[_Union[KeyByStep, _Mapping]] = ...) -> None: ...

class SelectStep(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[SelectItem]
    def __init__(self, items: _Optional[_Iterable[_Union[SelectItem, _Mapping]]] = ...) -> None: ...

class SelectItem(_message.Message):
    __slots__ = ("expr", "alias")
    EXPR_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    expr: str
    alias: str
    def __init__(self, expr: _Optional[str] = ..., alias: _Optional[str] = ...) -> None: ...

class FilterStep(_message.Message):
    __slots__ = ("condition",)
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    condition: str
    def __init__(self, condition: _Optional[str] = ...) -> None: ...

class KeyByStep(_message.Message):
    __slots__ = ("keys", "aggregates", "window")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    AGGREGATES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    aggregates: _containers.RepeatedCompositeFieldContainer[Aggregate]
    window: EventTimeWindow
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., aggregates: _Optional[_Iterable[_Union[Aggregate, _Mapping]]] = ..., window: _Optional[_Union[EventTimeWindow, _Mapping]] = ...) -> None: ...

class Aggregate(_message.Message):
    __slots__ = ("function", "column", "name")
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    function: str
    column: str
    name: str
    def __init__(self, function: _Optional[str] = ..., column: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class EventTimeWindow(_message.Message):
    __slots__ = ("kind", "size_ms", "slide_ms", "gap_ms", "timestamp_column", "max_out_of_orderness_ms", "allowed_lateness_ms")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_MS_FIELD_NUMBER: _ClassVar[int]
    SLIDE_MS_FIELD_NUMBER: _ClassVar[int]
    GAP_MS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_COLUMN_FIELD_NUMBER: _ClassVar[int]
    MAX_OUT_OF_ORDERNESS_MS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_LATENESS_MS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    size_ms: int
    slide_ms: int
    gap_ms: int
    timestamp_column: str
    max_out_of_orderness_ms: int
    allowed_lateness_ms: int
    def __init__(self, kind: _Optional[str] = ..., size_ms: _Optional[int] = ..., slide_ms: _Optional[int] = ..., gap_ms: _Optional[int] = ..., timestamp_column: _Optional[str] = ..., max_out_of_orderness_ms: _Optional[int] = ..., allowed_lateness_ms: _Optional[int] = ...) -> None: ...

class DeclarativeSink(_message.Message):
    __slots__ = ("format", "path", "columns")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    format: str
    path: str
    columns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, format: _Optional[str] = ..., path: _Optional[str] = ..., columns: _Optional[_Iterable[str]] = ...) -> None: ...
