from sluice.v1 import common_pb2 as _common_pb2
from sluice.v1 import declarative_pb2 as _declarative_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_OUTCOME_UNSPECIFIED: _ClassVar[AckOutcome]
    ACK_OUTCOME_SUCCESS: _ClassVar[AckOutcome]
    ACK_OUTCOME_DUPLICATE: _ClassVar[AckOutcome]
    ACK_OUTCOME_UNKNOWN: _ClassVar[AckOutcome]
    ACK_OUTCOME_DISCARDED: _ClassVar[AckOutcome]

class FailureCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_CAUSE_UNSPECIFIED: _ClassVar[FailureCause]
    FAILURE_CAUSE_TASK_ERROR: _ClassVar[FailureCause]
    FAILURE_CAUSE_PEER_UNREACHABLE: _ClassVar[FailureCause]
    FAILURE_CAUSE_NON_RECOVERABLE: _ClassVar[FailureCause]
ACK_OUTCOME_UNSPECIFIED: AckOutcome
ACK_OUTCOME_SUCCESS: AckOutcome
ACK_OUTCOME_DUPLICATE: AckOutcome
ACK_OUTCOME_UNKNOWN: AckOutcome
ACK_OUTCOME_DISCARDED: AckOutcome
FAILURE_CAUSE_UNSPECIFIED: FailureCause
FAILURE_CAUSE_TASK_ERROR: FailureCause
FAILURE_CAUSE_PEER_UNREACHABLE: FailureCause
FAILURE_CAUSE_NON_RECOVERABLE: FailureCause

class SubmitJobRequest(_message.Message):
    __slots__ = ("job", "restore_path", "allow_non_restored_state", "declarative")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RESTORE_PATH_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NON_RESTORED_STATE_FIELD_NUMBER: _ClassVar[int]
    DECLARATIVE_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.JobGraph
    restore_path: str
    allow_non_restored_state: bool
    declarative: _declarative_pb2.DeclarativeJob
    def __init__(self, job: _Optional[_Union[_common_pb2.JobGraph, _Mapping]] = ..., restore_path: _Optional[str] = ..., allow_non_restored_state: _Optional[bool] = ..., declarative: _Optional[_Union[_declarative_pb2.DeclarativeJob, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.JobInfo]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.JobInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.JobState
    def __init__(self, state: _Optional[_Union[_common_pb2.JobState, str]] = ...) -> None: ...

class GetClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TriggerSavepointRequest(_message.Message):
    __slots__ = ("job_id", "target_directory")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    target_directory: str
    def __init__(self, job_id: _Optional[str] = ..., target_directory: _Optional[str] = ...) -> None: ...

class TriggerSavepointResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class StopJobRequest(_message.Message):
    __slots__ = ("job_id", "target_directory")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    target_directory: str
    def __init__(self, job_id: _Optional[str] = ..., target_directory: _Optional[str] = ...) -> None: ...

class StopJobResponse(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class GetJobGraphRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ReconfigureJobRequest(_message.Message):
    __slots__ = ("job_id", "operator_uid", "parallelism", "new_job", "rebalance_keys")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_UID_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    NEW_JOB_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_KEYS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    operator_uid: str
    parallelism: int
    new_job: _common_pb2.JobGraph
    rebalance_keys: bool
    def __init__(self, job_id: _Optional[str] = ..., operator_uid: _Optional[str] = ..., parallelism: _Optional[int] = ..., new_job: _Optional[_Union[_common_pb2.JobGraph, _Mapping]] = ..., rebalance_keys: _Optional[bool] = ...) -> None: ...

class ReconfigureJobResponse(_message.Message):
    __slots__ = ("reconfiguration_id",)
    RECONFIGURATION_ID_FIELD_NUMBER: _ClassVar[int]
    reconfiguration_id: str
    def __init__(self, reconfiguration_id: _Optional[str] = ...) -> None: ...

class TaskManagerOverview(_message.Message):
    __slots__ = ("resource_id", "address", "slots", "free_slots", "seconds_since_heartbeat")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_SINCE_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    address: str
    slots: int
    free_slots: int
    seconds_since_heartbeat: float
    def __init__(self, resource_id: _Optional[str] = ..., address: _Optional[str] = ..., slots: _Optional[int] = ..., free_slots: _Optional[int] = ..., seconds_since_heartbeat: _Optional[float] = ...) -> None: ...

class ClusterOverview(_message.Message):
    __slots__ = ("leader", "taskmanagers", "total_slots", "free_slots")
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TASKMANAGERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SLOTS_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    leader: str
    taskmanagers: _containers.RepeatedCompositeFieldContainer[TaskManagerOverview]
    total_slots: int
    free_slots: int
    def __init__(self, leader: _Optional[str] = ..., taskmanagers: _Optional[_Iterable[_Union[TaskManagerOverview, _Mapping]]] = ..., total_slots: _Optional[int] = ..., free_slots: _Optional[int] = ...) -> None: ...

class RequestSplitsRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "operator_id", "received", "last_checkpoint", "idle")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    operator_id: str
    received: int
    last_checkpoint: int
    idle: bool
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., operator_id: _Optional[str] = ..., received: _Optional[int] = ..., last_checkpoint: _Optional[int] = ..., idle: _Optional[bool] = ...) -> None: ...

class RequestSplitsResponse(_message.Message):
    __slots__ = ("first", "splits", "no_more_splits")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    NO_MORE_SPLITS_FIELD_NUMBER: _ClassVar[int]
    first: int
    splits: _containers.RepeatedScalarFieldContainer[str]
    no_more_splits: bool
    def __init__(self, first: _Optional[int] = ..., splits: _Optional[_Iterable[str]] = ..., no_more_splits: _Optional[bool] = ...) -> None: ...

class AcknowledgeCheckpointRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "checkpoint_id", "state_handle", "size_bytes")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_HANDLE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    checkpoint_id: int
    state_handle: bytes
    size_bytes: int
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., state_handle: _Optional[bytes] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class AcknowledgeCheckpointResponse(_message.Message):
    __slots__ = ("outcome",)
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    outcome: AckOutcome
    def __init__(self, outcome: _Optional[_Union[AckOutcome, str]] = ...) -> None: ...

class DeclineCheckpointRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "checkpoint_id", "reason")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    checkpoint_id: int
    reason: str
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class DeclineCheckpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterTaskManagerRequest(_message.Message):
    __slots__ = ("resource_id", "address", "slots")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    address: str
    slots: int
    def __init__(self, resource_id: _Optional[str] = ..., address: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class RegisterTaskManagerResponse(_message.Message):
    __slots__ = ("leader_session_id", "heartbeat_interval_ms")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    heartbeat_interval_ms: int
    def __init__(self, leader_session_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ...) -> None: ...

class SlotStatus(_message.Message):
    __slots__ = ("slot_index", "job_id", "execution_ids")
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_IDS_FIELD_NUMBER: _ClassVar[int]
    slot_index: int
    job_id: str
    execution_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, slot_index: _Optional[int] = ..., job_id: _Optional[str] = ..., execution_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TaskMetrics(_message.Message):
    __slots__ = ("job_id", "execution_id", "counters", "bad_record_samples", "watermark", "key_group_records", "io")
    class KeyGroupRecordsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    BAD_RECORD_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    KEY_GROUP_RECORDS_FIELD_NUMBER: _ClassVar[int]
    IO_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    execution_id: str
    counters: _common_pb2.TaskCounters
    bad_record_samples: _containers.RepeatedScalarFieldContainer[str]
    watermark: int
    key_group_records: _containers.ScalarMap[int, int]
    io: _common_pb2.TaskIOMetrics
    def __init__(self, job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., counters: _Optional[_Union[_common_pb2.TaskCounters, _Mapping]] = ..., bad_record_samples: _Optional[_Iterable[str]] = ..., watermark: _Optional[int] = ..., key_group_records: _Optional[_Mapping[int, int]] = ..., io: _Optional[_Union[_common_pb2.TaskIOMetrics, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("resource_id", "leader_session_id", "slots", "tasks")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    leader_session_id: str
    slots: _containers.RepeatedCompositeFieldContainer[SlotStatus]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskMetrics]
    def __init__(self, resource_id: _Optional[str] = ..., leader_session_id: _Optional[str] = ..., slots: _Optional[_Iterable[_Union[SlotStatus, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[TaskMetrics, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("known",)
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    known: bool
    def __init__(self, known: _Optional[bool] = ...) -> None: ...

class TaskExecutionState(_message.Message):
    __slots__ = ("resource_id", "leader_session_id", "job_id", "attempt", "execution_id", "state", "error", "counters", "end_of_input", "failure_cause", "unreachable_peer", "bad_record_samples", "watermark")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    END_OF_INPUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_CAUSE_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_PEER_FIELD_NUMBER: _ClassVar[int]
    BAD_RECORD_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    leader_session_id: str
    job_id: str
    attempt: int
    execution_id: str
    state: _common_pb2.ExecutionState
    error: str
    counters: _common_pb2.TaskCounters
    end_of_input: bool
    failure_cause: FailureCause
    unreachable_peer: str
    bad_record_samples: _containers.RepeatedScalarFieldContainer[str]
    watermark: int
    def __init__(self, resource_id: _Optional[str] = ..., leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., execution_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., error: _Optional[str] = ..., counters: _Optional[_Union[_common_pb2.TaskCounters, _Mapping]] = ..., end_of_input: _Optional[bool] = ..., failure_cause: _Optional[_Union[FailureCause, str]] = ..., unreachable_peer: _Optional[str] = ..., bad_record_samples: _Optional[_Iterable[str]] = ..., watermark: _Optional[int] = ...) -> None: ...

class UpdateTaskExecutionStateResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...
