from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_CREATED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_RESTARTING: _ClassVar[JobState]
    JOB_STATE_FINISHED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELED: _ClassVar[JobState]

class ExecutionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATE_UNSPECIFIED: _ClassVar[ExecutionState]
    EXECUTION_STATE_CREATED: _ClassVar[ExecutionState]
    EXECUTION_STATE_DEPLOYING: _ClassVar[ExecutionState]
    EXECUTION_STATE_RUNNING: _ClassVar[ExecutionState]
    EXECUTION_STATE_FINISHED: _ClassVar[ExecutionState]
    EXECUTION_STATE_CANCELING: _ClassVar[ExecutionState]
    EXECUTION_STATE_CANCELED: _ClassVar[ExecutionState]
    EXECUTION_STATE_FAILED: _ClassVar[ExecutionState]

class CheckpointStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_STATUS_UNSPECIFIED: _ClassVar[CheckpointStatus]
    CHECKPOINT_STATUS_IN_PROGRESS: _ClassVar[CheckpointStatus]
    CHECKPOINT_STATUS_PERSISTING: _ClassVar[CheckpointStatus]
    CHECKPOINT_STATUS_COMPLETED: _ClassVar[CheckpointStatus]
    CHECKPOINT_STATUS_FAILED: _ClassVar[CheckpointStatus]

class OperatorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATOR_KIND_UNSPECIFIED: _ClassVar[OperatorKind]
    OPERATOR_KIND_SOURCE_FILES: _ClassVar[OperatorKind]
    OPERATOR_KIND_SOURCE_GENERATOR: _ClassVar[OperatorKind]
    OPERATOR_KIND_SOURCE_COLLECTION: _ClassVar[OperatorKind]
    OPERATOR_KIND_MAP: _ClassVar[OperatorKind]
    OPERATOR_KIND_FILTER: _ClassVar[OperatorKind]
    OPERATOR_KIND_FLAT_MAP: _ClassVar[OperatorKind]
    OPERATOR_KIND_SELECT: _ClassVar[OperatorKind]
    OPERATOR_KIND_AGGREGATE: _ClassVar[OperatorKind]
    OPERATOR_KIND_SINK_FILE: _ClassVar[OperatorKind]
    OPERATOR_KIND_SINK_PRINT: _ClassVar[OperatorKind]
    OPERATOR_KIND_SINK_SQLITE: _ClassVar[OperatorKind]
    OPERATOR_KIND_TIMESTAMPS: _ClassVar[OperatorKind]
    OPERATOR_KIND_WINDOW: _ClassVar[OperatorKind]
    OPERATOR_KIND_PROCESS: _ClassVar[OperatorKind]
    OPERATOR_KIND_INTERVAL_JOIN: _ClassVar[OperatorKind]
    OPERATOR_KIND_JOIN_TABLE: _ClassVar[OperatorKind]
    OPERATOR_KIND_BROADCAST_PROCESS: _ClassVar[OperatorKind]
    OPERATOR_KIND_WINDOW_JOIN: _ClassVar[OperatorKind]
    OPERATOR_KIND_SOURCE_CONNECTOR: _ClassVar[OperatorKind]
    OPERATOR_KIND_SINK_CONNECTOR: _ClassVar[OperatorKind]
    OPERATOR_KIND_DEDUPLICATE: _ClassVar[OperatorKind]

class Partitioning(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARTITIONING_UNSPECIFIED: _ClassVar[Partitioning]
    PARTITIONING_FORWARD: _ClassVar[Partitioning]
    PARTITIONING_HASH: _ClassVar[Partitioning]
    PARTITIONING_REBALANCE: _ClassVar[Partitioning]
    PARTITIONING_BROADCAST: _ClassVar[Partitioning]

class ReconfigurationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RECONFIGURATION_STATUS_UNSPECIFIED: _ClassVar[ReconfigurationStatus]
    RECONFIGURATION_STATUS_IN_PROGRESS: _ClassVar[ReconfigurationStatus]
    RECONFIGURATION_STATUS_COMPLETED: _ClassVar[ReconfigurationStatus]
    RECONFIGURATION_STATUS_FAILED: _ClassVar[ReconfigurationStatus]
    RECONFIGURATION_STATUS_ABORTED: _ClassVar[ReconfigurationStatus]

class SavepointStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAVEPOINT_STATUS_UNSPECIFIED: _ClassVar[SavepointStatus]
    SAVEPOINT_STATUS_IN_PROGRESS: _ClassVar[SavepointStatus]
    SAVEPOINT_STATUS_COMPLETED: _ClassVar[SavepointStatus]
    SAVEPOINT_STATUS_FAILED: _ClassVar[SavepointStatus]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_CREATED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_RESTARTING: JobState
JOB_STATE_FINISHED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELED: JobState
EXECUTION_STATE_UNSPECIFIED: ExecutionState
EXECUTION_STATE_CREATED: ExecutionState
EXECUTION_STATE_DEPLOYING: ExecutionState
EXECUTION_STATE_RUNNING: ExecutionState
EXECUTION_STATE_FINISHED: ExecutionState
EXECUTION_STATE_CANCELING: ExecutionState
EXECUTION_STATE_CANCELED: ExecutionState
EXECUTION_STATE_FAILED: ExecutionState
CHECKPOINT_STATUS_UNSPECIFIED: CheckpointStatus
CHECKPOINT_STATUS_IN_PROGRESS: CheckpointStatus
CHECKPOINT_STATUS_PERSISTING: CheckpointStatus
CHECKPOINT_STATUS_COMPLETED: CheckpointStatus
CHECKPOINT_STATUS_FAILED: CheckpointStatus
OPERATOR_KIND_UNSPECIFIED: OperatorKind
OPERATOR_KIND_SOURCE_FILES: OperatorKind
OPERATOR_KIND_SOURCE_GENERATOR: OperatorKind
OPERATOR_KIND_SOURCE_COLLECTION: OperatorKind
OPERATOR_KIND_MAP: OperatorKind
OPERATOR_KIND_FILTER: OperatorKind
OPERATOR_KIND_FLAT_MAP: OperatorKind
OPERATOR_KIND_SELECT: OperatorKind
OPERATOR_KIND_AGGREGATE: OperatorKind
OPERATOR_KIND_SINK_FILE: OperatorKind
OPERATOR_KIND_SINK_PRINT: OperatorKind
OPERATOR_KIND_SINK_SQLITE: OperatorKind
OPERATOR_KIND_TIMESTAMPS: OperatorKind
OPERATOR_KIND_WINDOW: OperatorKind
OPERATOR_KIND_PROCESS: OperatorKind
OPERATOR_KIND_INTERVAL_JOIN: OperatorKind
OPERATOR_KIND_JOIN_TABLE: OperatorKind
OPERATOR_KIND_BROADCAST_PROCESS: OperatorKind
OPERATOR_KIND_WINDOW_JOIN: OperatorKind
OPERATOR_KIND_SOURCE_CONNECTOR: OperatorKind
OPERATOR_KIND_SINK_CONNECTOR: OperatorKind
OPERATOR_KIND_DEDUPLICATE: OperatorKind
PARTITIONING_UNSPECIFIED: Partitioning
PARTITIONING_FORWARD: Partitioning
PARTITIONING_HASH: Partitioning
PARTITIONING_REBALANCE: Partitioning
PARTITIONING_BROADCAST: Partitioning
RECONFIGURATION_STATUS_UNSPECIFIED: ReconfigurationStatus
RECONFIGURATION_STATUS_IN_PROGRESS: ReconfigurationStatus
RECONFIGURATION_STATUS_COMPLETED: ReconfigurationStatus
RECONFIGURATION_STATUS_FAILED: ReconfigurationStatus
RECONFIGURATION_STATUS_ABORTED: ReconfigurationStatus
SAVEPOINT_STATUS_UNSPECIFIED: SavepointStatus
SAVEPOINT_STATUS_IN_PROGRESS: SavepointStatus
SAVEPOINT_STATUS_COMPLETED: SavepointStatus
SAVEPOINT_STATUS_FAILED: SavepointStatus

class OperatorSpec(_message.Message):
    __slots__ = ("id", "name", "kind", "parallelism", "config", "code", "output_schema")
    class CodeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    kind: OperatorKind
    parallelism: int
    config: str
    code: _containers.ScalarMap[str, bytes]
    output_schema: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[OperatorKind, str]] = ..., parallelism: _Optional[int] = ..., config: _Optional[str] = ..., code: _Optional[_Mapping[str, bytes]] = ..., output_schema: _Optional[str] = ...) -> None: ...

class EdgeSpec(_message.Message):
    __slots__ = ("source", "target", "partitioning", "keys", "output_tag")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PARTITIONING_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAG_FIELD_NUMBER: _ClassVar[int]
    source: str
    target: str
    partitioning: Partitioning
    keys: _containers.RepeatedScalarFieldContainer[str]
    output_tag: str
    def __init__(self, source: _Optional[str] = ..., target: _Optional[str] = ..., partitioning: _Optional[_Union[Partitioning, str]] = ..., keys: _Optional[_Iterable[str]] = ..., output_tag: _Optional[str] = ...) -> None: ...

class JobGraph(_message.Message):
    __slots__ = ("name", "operators", "edges", "max_parallelism", "config", "key_group_owners")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class KeyGroupOwnersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: KeyGroupOwners
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[KeyGroupOwners, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    KEY_GROUP_OWNERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    operators: _containers.RepeatedCompositeFieldContainer[OperatorSpec]
    edges: _containers.RepeatedCompositeFieldContainer[EdgeSpec]
    max_parallelism: int
    config: _containers.ScalarMap[str, str]
    key_group_owners: _containers.MessageMap[str, KeyGroupOwners]
    def __init__(self, name: _Optional[str] = ..., operators: _Optional[_Iterable[_Union[OperatorSpec, _Mapping]]] = ..., edges: _Optional[_Iterable[_Union[EdgeSpec, _Mapping]]] = ..., max_parallelism: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ..., key_group_owners: _Optional[_Mapping[str, KeyGroupOwners]] = ...) -> None: ...

class KeyGroupOwners(_message.Message):
    __slots__ = ("owners",)
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    owners: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, owners: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("operator", "subtask", "state", "taskmanager", "error", "counters", "bad_record_samples", "watermark", "io", "chain_id", "attempt", "execution_attempt", "speculative", "region")
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASKMANAGER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    BAD_RECORD_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    IO_FIELD_NUMBER: _ClassVar[int]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    operator: str
    subtask: int
    state: ExecutionState
    taskmanager: str
    error: str
    counters: TaskCounters
    bad_record_samples: _containers.RepeatedScalarFieldContainer[str]
    watermark: int
    io: TaskIOMetrics
    chain_id: str
    attempt: int
    execution_attempt: int
    speculative: bool
    region: str
    def __init__(self, operator: _Optional[str] = ..., subtask: _Optional[int] = ..., state: _Optional[_Union[ExecutionState, str]] = ..., taskmanager: _Optional[str] = ..., error: _Optional[str] = ..., counters: _Optional[_Union[TaskCounters, _Mapping]] = ..., bad_record_samples: _Optional[_Iterable[str]] = ..., watermark: _Optional[int] = ..., io: _Optional[_Union[TaskIOMetrics, _Mapping]] = ..., chain_id: _Optional[str] = ..., attempt: _Optional[int] = ..., execution_attempt: _Optional[int] = ..., speculative: _Optional[bool] = ..., region: _Optional[str] = ...) -> None: ...

class TaskCounters(_message.Message):
    __slots__ = ("records_in", "records_out", "records_sent", "records_malformed", "records_dropped", "records_late_dropped")
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_SENT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_MALFORMED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LATE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    records_in: int
    records_out: int
    records_sent: int
    records_malformed: int
    records_dropped: int
    records_late_dropped: int
    def __init__(self, records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., records_sent: _Optional[int] = ..., records_malformed: _Optional[int] = ..., records_dropped: _Optional[int] = ..., records_late_dropped: _Optional[int] = ...) -> None: ...

class TaskIOMetrics(_message.Message):
    __slots__ = ("bytes_in", "bytes_out", "records_in_per_second", "records_out_per_second", "bytes_in_per_second", "bytes_out_per_second", "busy_ms_per_second", "idle_ms_per_second", "backpressured_ms_per_second", "input_queue_usage", "output_queue_usage", "checkpoint_alignment_ms", "checkpoint_sync_ms", "checkpoint_async_ms", "checkpoint_id")
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_IN_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BUSY_MS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    IDLE_MS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURED_MS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    INPUT_QUEUE_USAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_QUEUE_USAGE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ALIGNMENT_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SYNC_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ASYNC_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    bytes_in: int
    bytes_out: int
    records_in_per_second: float
    records_out_per_second: float
    bytes_in_per_second: float
    bytes_out_per_second: float
    busy_ms_per_second: float
    idle_ms_per_second: float
    backpressured_ms_per_second: float
    input_queue_usage: float
    output_queue_usage: float
    checkpoint_alignment_ms: int
    checkpoint_sync_ms: int
    checkpoint_async_ms: int
    checkpoint_id: int
    def __init__(self, bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., records_in_per_second: _Optional[float] = ..., records_out_per_second: _Optional[float] = ..., bytes_in_per_second: _Optional[float] = ..., bytes_out_per_second: _Optional[float] = ..., busy_ms_per_second: _Optional[float] = ..., idle_ms_per_second: _Optional[float] = ..., backpressured_ms_per_second: _Optional[float] = ..., input_queue_usage: _Optional[float] = ..., output_queue_usage: _Optional[float] = ..., checkpoint_alignment_ms: _Optional[int] = ..., checkpoint_sync_ms: _Optional[int] = ..., checkpoint_async_ms: _Optional[int] = ..., checkpoint_id: _Optional[int] = ...) -> None: ...

class JobMetrics(_message.Message):
    __slots__ = ("num_restarts", "number_of_completed_checkpoints", "number_of_failed_checkpoints", "last_checkpoint_duration_ms", "last_checkpoint_size_bytes", "uptime_ms", "last_checkpoint_restore_ms")
    NUM_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_OF_COMPLETED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_OF_FAILED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_RESTORE_MS_FIELD_NUMBER: _ClassVar[int]
    num_restarts: int
    number_of_completed_checkpoints: int
    number_of_failed_checkpoints: int
    last_checkpoint_duration_ms: int
    last_checkpoint_size_bytes: int
    uptime_ms: int
    last_checkpoint_restore_ms: int
    def __init__(self, num_restarts: _Optional[int] = ..., number_of_completed_checkpoints: _Optional[int] = ..., number_of_failed_checkpoints: _Optional[int] = ..., last_checkpoint_duration_ms: _Optional[int] = ..., last_checkpoint_size_bytes: _Optional[int] = ..., uptime_ms: _Optional[int] = ..., last_checkpoint_restore_ms: _Optional[int] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "name", "state", "restarts", "last_completed_checkpoint", "restored_checkpoint", "leader", "tasks", "message", "failure", "submitted_ms", "ended_ms", "slots_required", "slots_available", "checkpoints", "exceptions", "records_dropped", "bad_record_samples", "records_late_dropped", "savepoint", "savepoints", "restored_savepoint", "reconfigurations", "metrics")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    RESTORED_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    SLOTS_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    EXCEPTIONS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    BAD_RECORD_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LATE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINTS_FIELD_NUMBER: _ClassVar[int]
    RESTORED_SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATIONS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    state: JobState
    restarts: int
    last_completed_checkpoint: int
    restored_checkpoint: int
    leader: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    message: str
    failure: str
    submitted_ms: int
    ended_ms: int
    slots_required: int
    slots_available: int
    checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointStats]
    exceptions: _containers.RepeatedCompositeFieldContainer[ExceptionEntry]
    records_dropped: int
    bad_record_samples: _containers.RepeatedScalarFieldContainer[str]
    records_late_dropped: int
    savepoint: str
    savepoints: _containers.RepeatedCompositeFieldContainer[SavepointInfo]
    restored_savepoint: str
    reconfigurations: _containers.RepeatedCompositeFieldContainer[ReconfigurationInfo]
    metrics: JobMetrics
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., restarts: _Optional[int] = ..., last_completed_checkpoint: _Optional[int] = ..., restored_checkpoint: _Optional[int] = ..., leader: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., message: _Optional[str] = ..., failure: _Optional[str] = ..., submitted_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., slots_required: _Optional[int] = ..., slots_available: _Optional[int] = ..., checkpoints: _Optional[_Iterable[_Union[CheckpointStats, _Mapping]]] = ..., exceptions: _Optional[_Iterable[_Union[ExceptionEntry, _Mapping]]] = ..., records_dropped: _Optional[int] = ..., bad_record_samples: _Optional[_Iterable[str]] = ..., records_late_dropped: _Optional[int] = ..., savepoint: _Optional[str] = ..., savepoints: _Optional[_Iterable[_Union[SavepointInfo, _Mapping]]] = ..., restored_savepoint: _Optional[str] = ..., reconfigurations: _Optional[_Iterable[_Union[ReconfigurationInfo, _Mapping]]] = ..., metrics: _Optional[_Union[JobMetrics, _Mapping]] = ...) -> None: ...

class ReconfigurationInfo(_message.Message):
    __slots__ = ("id", "kind", "operator", "parallelism", "redeployed", "switched", "status", "checkpoint_id", "trigger_ms", "pause_ms", "failure", "moved_key_groups", "from_subtask", "to_subtask")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    REDEPLOYED_FIELD_NUMBER: _ClassVar[int]
    SWITCHED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_MS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    MOVED_KEY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    FROM_SUBTASK_FIELD_NUMBER: _ClassVar[int]
    TO_SUBTASK_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    operator: str
    parallelism: int
    redeployed: _containers.RepeatedScalarFieldContainer[str]
    switched: _containers.RepeatedScalarFieldContainer[str]
    status: ReconfigurationStatus
    checkpoint_id: int
    trigger_ms: int
    pause_ms: int
    failure: str
    moved_key_groups: _containers.RepeatedScalarFieldContainer[int]
    from_subtask: int
    to_subtask: int
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., operator: _Optional[str] = ..., parallelism: _Optional[int] = ..., redeployed: _Optional[_Iterable[str]] = ..., switched: _Optional[_Iterable[str]] = ..., status: _Optional[_Union[ReconfigurationStatus, str]] = ..., checkpoint_id: _Optional[int] = ..., trigger_ms: _Optional[int] = ..., pause_ms: _Optional[int] = ..., failure: _Optional[str] = ..., moved_key_groups: _Optional[_Iterable[int]] = ..., from_subtask: _Optional[int] = ..., to_subtask: _Optional[int] = ...) -> None: ...

class SavepointInfo(_message.Message):
    __slots__ = ("request_id", "status", "path", "failure", "checkpoint_id", "stop", "trigger_ms", "duration_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: SavepointStatus
    path: str
    failure: str
    checkpoint_id: int
    stop: bool
    trigger_ms: int
    duration_ms: int
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[_Union[SavepointStatus, str]] = ..., path: _Optional[str] = ..., failure: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., stop: _Optional[bool] = ..., trigger_ms: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ExceptionEntry(_message.Message):
    __slots__ = ("time_ms", "attempt", "task", "cause", "traceback", "restarted")
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    RESTARTED_FIELD_NUMBER: _ClassVar[int]
    time_ms: int
    attempt: int
    task: str
    cause: str
    traceback: str
    restarted: bool
    def __init__(self, time_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., task: _Optional[str] = ..., cause: _Optional[str] = ..., traceback: _Optional[str] = ..., restarted: _Optional[bool] = ...) -> None: ...

class CheckpointStats(_message.Message):
    __slots__ = ("checkpoint_id", "status", "trigger_ms", "duration_ms", "size_bytes", "failure", "acks", "expected", "full_size_bytes")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    FULL_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    status: CheckpointStatus
    trigger_ms: int
    duration_ms: int
    size_bytes: int
    failure: str
    acks: int
    expected: int
    full_size_bytes: int
    def __init__(self, checkpoint_id: _Optional[int] = ..., status: _Optional[_Union[CheckpointStatus, str]] = ..., trigger_ms: _Optional[int] = ..., duration_ms: _Optional[int] = ..., size_bytes: _Optional[int] = ..., failure: _Optional[str] = ..., acks: _Optional[int] = ..., expected: _Optional[int] = ..., full_size_bytes: _Optional[int] = ...) -> None: ...
