from sluice.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReadLogRequest(_message.Message):
    __slots__ = ("leader_session_id", "max_bytes")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    max_bytes: int
    def __init__(self, leader_session_id: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadLogResponse(_message.Message):
    __slots__ = ("data", "truncated", "file", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    truncated: bool
    file: str
    size: int
    def __init__(self, data: _Optional[bytes] = ..., truncated: _Optional[bool] = ..., file: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class PrepareReconfigurationRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "reconfiguration_id", "from_checkpoint_id", "retire", "outputs", "targets")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATION_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RETIRE_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    reconfiguration_id: str
    from_checkpoint_id: int
    retire: bool
    outputs: _containers.RepeatedCompositeFieldContainer[ResultPartitionDescriptor]
    targets: _containers.RepeatedCompositeFieldContainer[_common_pb2.OperatorSpec]
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., reconfiguration_id: _Optional[str] = ..., from_checkpoint_id: _Optional[int] = ..., retire: _Optional[bool] = ..., outputs: _Optional[_Iterable[_Union[ResultPartitionDescriptor, _Mapping]]] = ..., targets: _Optional[_Iterable[_Union[_common_pb2.OperatorSpec, _Mapping]]] = ...) -> None: ...

class PrepareReconfigurationResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class AbortReconfigurationRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "reconfiguration_id")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURATION_ID_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    reconfiguration_id: str
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., reconfiguration_id: _Optional[str] = ...) -> None: ...

class TriggerCheckpointRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "checkpoint_id", "timestamp_ms", "final", "stop")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    checkpoint_id: int
    timestamp_ms: int
    final: bool
    stop: bool
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., final: _Optional[bool] = ..., stop: _Optional[bool] = ...) -> None: ...

class TriggerCheckpointResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class CheckpointNotification(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id", "checkpoint_id", "final")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    checkpoint_id: int
    final: bool
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., final: _Optional[bool] = ...) -> None: ...

class CheckpointNotificationResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class InputChannelDescriptor(_message.Message):
    __slots__ = ("partition_id", "address")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    address: str
    def __init__(self, partition_id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class InputGateDescriptor(_message.Message):
    __slots__ = ("upstream_chain", "channels")
    UPSTREAM_CHAIN_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    upstream_chain: str
    channels: _containers.RepeatedCompositeFieldContainer[InputChannelDescriptor]
    def __init__(self, upstream_chain: _Optional[str] = ..., channels: _Optional[_Iterable[_Union[InputChannelDescriptor, _Mapping]]] = ...) -> None: ...

class TaskDeploymentDescriptor(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "attempt", "execution_id", "chain_id", "operator_ids", "subtask_index", "parallelism", "slot_index", "job", "inputs", "outputs", "checkpoint_dir", "restore_checkpoint_id", "restore_state")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_IDS_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SLOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    RESTORE_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RESTORE_STATE_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    attempt: int
    execution_id: str
    chain_id: str
    operator_ids: _containers.RepeatedScalarFieldContainer[str]
    subtask_index: int
    parallelism: int
    slot_index: int
    job: _common_pb2.JobGraph
    inputs: _containers.RepeatedCompositeFieldContainer[InputGateDescriptor]
    outputs: _containers.RepeatedCompositeFieldContainer[ResultPartitionDescriptor]
    checkpoint_dir: str
    restore_checkpoint_id: int
    restore_state: bytes
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., execution_id: _Optional[str] = ..., chain_id: _Optional[str] = ..., operator_ids: _Optional[_Iterable[str]] = ..., subtask_index: _Optional[int] = ..., parallelism: _Optional[int] = ..., slot_index: _Optional[int] = ..., job: _Optional[_Union[_common_pb2.JobGraph, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[InputGateDescriptor, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[ResultPartitionDescriptor, _Mapping]]] = ..., checkpoint_dir: _Optional[str] = ..., restore_checkpoint_id: _Optional[int] = ..., restore_state: _Optional[bytes] = ...) -> None: ...

class ResultPartitionDescriptor(_message.Message):
    __slots__ = ("partition_id", "target_chain", "partitioning", "keys", "num_subpartitions", "output_tag", "key_group_owners", "blocking")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_CHAIN_FIELD_NUMBER: _ClassVar[int]
    PARTITIONING_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TAG_FIELD_NUMBER: _ClassVar[int]
    KEY_GROUP_OWNERS_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    target_chain: str
    partitioning: _common_pb2.Partitioning
    keys: _containers.RepeatedScalarFieldContainer[str]
    num_subpartitions: int
    output_tag: str
    key_group_owners: _containers.RepeatedScalarFieldContainer[int]
    blocking: bool
    def __init__(self, partition_id: _Optional[str] = ..., target_chain: _Optional[str] = ..., partitioning: _Optional[_Union[_common_pb2.Partitioning, str]] = ..., keys: _Optional[_Iterable[str]] = ..., num_subpartitions: _Optional[int] = ..., output_tag: _Optional[str] = ..., key_group_owners: _Optional[_Iterable[int]] = ..., blocking: _Optional[bool] = ...) -> None: ...

class SubmitTaskResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "execution_id")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    execution_id: str
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., execution_id: _Optional[str] = ...) -> None: ...

class CancelTaskResponse(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class ReleasePartitionsRequest(_message.Message):
    __slots__ = ("leader_session_id", "job_id", "partition_ids", "all_of_job")
    LEADER_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_IDS_FIELD_NUMBER: _ClassVar[int]
    ALL_OF_JOB_FIELD_NUMBER: _ClassVar[int]
    leader_session_id: str
    job_id: str
    partition_ids: _containers.RepeatedScalarFieldContainer[str]
    all_of_job: bool
    def __init__(self, leader_session_id: _Optional[str] = ..., job_id: _Optional[str] = ..., partition_ids: _Optional[_Iterable[str]] = ..., all_of_job: _Optional[bool] = ...) -> None: ...

class ReleasePartitionsResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: int
    def __init__(self, released: _Optional[int] = ...) -> None: ...
