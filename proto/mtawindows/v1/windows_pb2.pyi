import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FieldType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FIELD_TYPE_UNSPECIFIED: _ClassVar[FieldType]
    DOUBLE: _ClassVar[FieldType]
    INT64: _ClassVar[FieldType]
    STRING: _ClassVar[FieldType]
    BOOL: _ClassVar[FieldType]
    TIMESTAMP: _ClassVar[FieldType]

class LatePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LATE_POLICY_UNSPECIFIED: _ClassVar[LatePolicy]
    REJECT: _ClassVar[LatePolicy]
    DROP: _ClassVar[LatePolicy]

class Algorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ALGORITHM_UNSPECIFIED: _ClassVar[Algorithm]
    AMTA: _ClassVar[Algorithm]
    LMTA: _ClassVar[Algorithm]
    TWO_STACKS: _ClassVar[Algorithm]
    TWO_STACKS_LITE: _ClassVar[Algorithm]
    DABA: _ClassVar[Algorithm]
    DABA_LITE: _ClassVar[Algorithm]
    FLATFAT: _ClassVar[Algorithm]
    BINT: _ClassVar[Algorithm]
    FLATFIT: _ClassVar[Algorithm]
    SLICKDEQUE: _ClassVar[Algorithm]

class StorageKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORAGE_KIND_UNSPECIFIED: _ClassVar[StorageKind]
    MEMORY: _ClassVar[StorageKind]
    REDIS: _ClassVar[StorageKind]

class ResultMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_MODE_UNSPECIFIED: _ClassVar[ResultMode]
    NONE: _ClassVar[ResultMode]
    FINAL: _ClassVar[ResultMode]
    PER_ROW: _ClassVar[ResultMode]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    INTERNAL: _ClassVar[ErrorReason]
    UNAUTHENTICATED: _ClassVar[ErrorReason]
    MALFORMED_REQUEST: _ClassVar[ErrorReason]
    INVALID_ARGUMENT: _ClassVar[ErrorReason]
    VALUE_TOO_LONG: _ClassVar[ErrorReason]
    TOO_MANY_ITEMS: _ClassVar[ErrorReason]
    UNKNOWN_ENUM_VALUE: _ClassVar[ErrorReason]
    STORE_UNAVAILABLE: _ClassVar[ErrorReason]
    SERVER_STOPPING: _ClassVar[ErrorReason]
    NOT_OWNER: _ClassVar[ErrorReason]
    STREAM_MOVING: _ClassVar[ErrorReason]
    FENCED: _ClassVar[ErrorReason]
    MEMBER_ISOLATED: _ClassVar[ErrorReason]
    OWNER_UNREACHABLE: _ClassVar[ErrorReason]
    STREAM_NOT_FOUND: _ClassVar[ErrorReason]
    WINDOW_NOT_FOUND: _ClassVar[ErrorReason]
    STREAM_EXISTS: _ClassVar[ErrorReason]
    WINDOW_EXISTS: _ClassVar[ErrorReason]
    TOO_MANY_STREAMS: _ClassVar[ErrorReason]
    TOO_MANY_WINDOWS: _ClassVar[ErrorReason]
    INVALID_DEFINITION: _ClassVar[ErrorReason]
    UNKNOWN_FIELD: _ClassVar[ErrorReason]
    UNKNOWN_MONOID: _ClassVar[ErrorReason]
    INVALID_EXPRESSION: _ClassVar[ErrorReason]
    CEL_TOO_LARGE: _ClassVar[ErrorReason]
    CEL_TOO_DEEP: _ClassVar[ErrorReason]
    AMBIGUOUS_BATCH: _ClassVar[ErrorReason]
    BAD_ARROW: _ClassVar[ErrorReason]
    SCHEMA_MISMATCH: _ClassVar[ErrorReason]
    BAD_VALUES: _ClassVar[ErrorReason]
    BATCH_TOO_LARGE: _ClassVar[ErrorReason]
    BAD_RESULT_MODE: _ClassVar[ErrorReason]
    OUT_OF_ORDER: _ClassVar[ErrorReason]
    TOO_MANY_SUBSCRIBERS: _ClassVar[ErrorReason]
    SUBSCRIBER_TOO_SLOW: _ClassVar[ErrorReason]
    UNSUBSCRIBED: _ClassVar[ErrorReason]
    MESSAGE_TOO_LARGE: _ClassVar[ErrorReason]
    LOWER_FAILED: _ClassVar[ErrorReason]
    KEY_NOT_FOUND: _ClassVar[ErrorReason]
    NOT_KEYED: _ClassVar[ErrorReason]
    TOO_MANY_KEYS: _ClassVar[ErrorReason]
    RANGE_NOT_SUPPORTED: _ClassVar[ErrorReason]
    NOT_COLUMNAR: _ClassVar[ErrorReason]
FIELD_TYPE_UNSPECIFIED: FieldType
DOUBLE: FieldType
INT64: FieldType
STRING: FieldType
BOOL: FieldType
TIMESTAMP: FieldType
LATE_POLICY_UNSPECIFIED: LatePolicy
REJECT: LatePolicy
DROP: LatePolicy
ALGORITHM_UNSPECIFIED: Algorithm
AMTA: Algorithm
LMTA: Algorithm
TWO_STACKS: Algorithm
TWO_STACKS_LITE: Algorithm
DABA: Algorithm
DABA_LITE: Algorithm
FLATFAT: Algorithm
BINT: Algorithm
FLATFIT: Algorithm
SLICKDEQUE: Algorithm
STORAGE_KIND_UNSPECIFIED: StorageKind
MEMORY: StorageKind
REDIS: StorageKind
RESULT_MODE_UNSPECIFIED: ResultMode
NONE: ResultMode
FINAL: ResultMode
PER_ROW: ResultMode
ERROR_REASON_UNSPECIFIED: ErrorReason
INTERNAL: ErrorReason
UNAUTHENTICATED: ErrorReason
MALFORMED_REQUEST: ErrorReason
INVALID_ARGUMENT: ErrorReason
VALUE_TOO_LONG: ErrorReason
TOO_MANY_ITEMS: ErrorReason
UNKNOWN_ENUM_VALUE: ErrorReason
STORE_UNAVAILABLE: ErrorReason
SERVER_STOPPING: ErrorReason
NOT_OWNER: ErrorReason
STREAM_MOVING: ErrorReason
FENCED: ErrorReason
MEMBER_ISOLATED: ErrorReason
OWNER_UNREACHABLE: ErrorReason
STREAM_NOT_FOUND: ErrorReason
WINDOW_NOT_FOUND: ErrorReason
STREAM_EXISTS: ErrorReason
WINDOW_EXISTS: ErrorReason
TOO_MANY_STREAMS: ErrorReason
TOO_MANY_WINDOWS: ErrorReason
INVALID_DEFINITION: ErrorReason
UNKNOWN_FIELD: ErrorReason
UNKNOWN_MONOID: ErrorReason
INVALID_EXPRESSION: ErrorReason
CEL_TOO_LARGE: ErrorReason
CEL_TOO_DEEP: ErrorReason
AMBIGUOUS_BATCH: ErrorReason
BAD_ARROW: ErrorReason
SCHEMA_MISMATCH: ErrorReason
BAD_VALUES: ErrorReason
BATCH_TOO_LARGE: ErrorReason
BAD_RESULT_MODE: ErrorReason
OUT_OF_ORDER: ErrorReason
TOO_MANY_SUBSCRIBERS: ErrorReason
SUBSCRIBER_TOO_SLOW: ErrorReason
UNSUBSCRIBED: ErrorReason
MESSAGE_TOO_LARGE: ErrorReason
LOWER_FAILED: ErrorReason
KEY_NOT_FOUND: ErrorReason
NOT_KEYED: ErrorReason
TOO_MANY_KEYS: ErrorReason
RANGE_NOT_SUPPORTED: ErrorReason
NOT_COLUMNAR: ErrorReason

class FieldSpec(_message.Message):
    __slots__ = ("name", "type", "allow_nan")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NAN_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: FieldType
    allow_nan: bool
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[FieldType, str]] = ..., allow_nan: _Optional[bool] = ...) -> None: ...

class StreamSpec(_message.Message):
    __slots__ = ("name", "timestamp_field", "fields", "late_policy", "allowed_lateness", "key", "key_groups", "key_ttl", "ts_unit", "not_wall_clock")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    LATE_POLICY_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_LATENESS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    KEY_TTL_FIELD_NUMBER: _ClassVar[int]
    TS_UNIT_FIELD_NUMBER: _ClassVar[int]
    NOT_WALL_CLOCK_FIELD_NUMBER: _ClassVar[int]
    name: str
    timestamp_field: str
    fields: _containers.RepeatedCompositeFieldContainer[FieldSpec]
    late_policy: LatePolicy
    allowed_lateness: _duration_pb2.Duration
    key: str
    key_groups: int
    key_ttl: _duration_pb2.Duration
    ts_unit: str
    not_wall_clock: bool
    def __init__(self, name: _Optional[str] = ..., timestamp_field: _Optional[str] = ..., fields: _Optional[_Iterable[_Union[FieldSpec, _Mapping]]] = ..., late_policy: _Optional[_Union[LatePolicy, str]] = ..., allowed_lateness: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., key: _Optional[str] = ..., key_groups: _Optional[int] = ..., key_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., ts_unit: _Optional[str] = ..., not_wall_clock: _Optional[bool] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("spec", "windows", "rows_appended", "rows_late", "batches_appended", "batches_duplicate", "newest_timestamp", "rows_buffered", "keys", "keys_expired")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    ROWS_APPENDED_FIELD_NUMBER: _ClassVar[int]
    ROWS_LATE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_APPENDED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    NEWEST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ROWS_BUFFERED_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    KEYS_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    spec: StreamSpec
    windows: _containers.RepeatedScalarFieldContainer[str]
    rows_appended: int
    rows_late: int
    batches_appended: int
    batches_duplicate: int
    newest_timestamp: int
    rows_buffered: int
    keys: int
    keys_expired: int
    def __init__(self, spec: _Optional[_Union[StreamSpec, _Mapping]] = ..., windows: _Optional[_Iterable[str]] = ..., rows_appended: _Optional[int] = ..., rows_late: _Optional[int] = ..., batches_appended: _Optional[int] = ..., batches_duplicate: _Optional[int] = ..., newest_timestamp: _Optional[int] = ..., rows_buffered: _Optional[int] = ..., keys: _Optional[int] = ..., keys_expired: _Optional[int] = ...) -> None: ...

class KeyInfo(_message.Message):
    __slots__ = ("key", "group", "rows_appended", "rows_late", "newest_timestamp", "last_append_ms", "results")
    KEY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    ROWS_APPENDED_FIELD_NUMBER: _ClassVar[int]
    ROWS_LATE_FIELD_NUMBER: _ClassVar[int]
    NEWEST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LAST_APPEND_MS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    key: str
    group: int
    rows_appended: int
    rows_late: int
    newest_timestamp: int
    last_append_ms: int
    results: _containers.RepeatedCompositeFieldContainer[WindowResult]
    def __init__(self, key: _Optional[str] = ..., group: _Optional[int] = ..., rows_appended: _Optional[int] = ..., rows_late: _Optional[int] = ..., newest_timestamp: _Optional[int] = ..., last_append_ms: _Optional[int] = ..., results: _Optional[_Iterable[_Union[WindowResult, _Mapping]]] = ...) -> None: ...

class Aggregation(_message.Message):
    __slots__ = ("name", "monoid", "field", "params")
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    MONOID_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    monoid: str
    field: str
    params: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., monoid: _Optional[str] = ..., field: _Optional[str] = ..., params: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CountPolicy(_message.Message):
    __slots__ = ("size",)
    SIZE_FIELD_NUMBER: _ClassVar[int]
    size: int
    def __init__(self, size: _Optional[int] = ...) -> None: ...

class TimeRangePolicy(_message.Message):
    __slots__ = ("range",)
    RANGE_FIELD_NUMBER: _ClassVar[int]
    range: _duration_pb2.Duration
    def __init__(self, range: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class BoundedSumPolicy(_message.Message):
    __slots__ = ("field", "bound")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    field: str
    bound: float
    def __init__(self, field: _Optional[str] = ..., bound: _Optional[float] = ...) -> None: ...

class MaxSubWindowPolicy(_message.Message):
    __slots__ = ("field", "max_size")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    field: str
    max_size: int
    def __init__(self, field: _Optional[str] = ..., max_size: _Optional[int] = ...) -> None: ...

class ExpressionPolicy(_message.Message):
    __slots__ = ("cel",)
    CEL_FIELD_NUMBER: _ClassVar[int]
    cel: str
    def __init__(self, cel: _Optional[str] = ...) -> None: ...

class SlidePolicy(_message.Message):
    __slots__ = ("count", "time_range", "bounded_sum", "max_sub_window", "expression")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIME_RANGE_FIELD_NUMBER: _ClassVar[int]
    BOUNDED_SUM_FIELD_NUMBER: _ClassVar[int]
    MAX_SUB_WINDOW_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    count: CountPolicy
    time_range: TimeRangePolicy
    bounded_sum: BoundedSumPolicy
    max_sub_window: MaxSubWindowPolicy
    expression: ExpressionPolicy
    def __init__(self, count: _Optional[_Union[CountPolicy, _Mapping]] = ..., time_range: _Optional[_Union[TimeRangePolicy, _Mapping]] = ..., bounded_sum: _Optional[_Union[BoundedSumPolicy, _Mapping]] = ..., max_sub_window: _Optional[_Union[MaxSubWindowPolicy, _Mapping]] = ..., expression: _Optional[_Union[ExpressionPolicy, _Mapping]] = ...) -> None: ...

class Storage(_message.Message):
    __slots__ = ("kind", "durable", "block_size", "cache_size")
    KIND_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    CACHE_SIZE_FIELD_NUMBER: _ClassVar[int]
    kind: StorageKind
    durable: bool
    block_size: int
    cache_size: int
    def __init__(self, kind: _Optional[_Union[StorageKind, str]] = ..., durable: _Optional[bool] = ..., block_size: _Optional[int] = ..., cache_size: _Optional[int] = ...) -> None: ...

class WindowSpec(_message.Message):
    __slots__ = ("stream", "name", "algorithm", "aggregations", "policy", "storage", "slide", "slide_rows")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    AGGREGATIONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    SLIDE_FIELD_NUMBER: _ClassVar[int]
    SLIDE_ROWS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    name: str
    algorithm: Algorithm
    aggregations: _containers.RepeatedCompositeFieldContainer[Aggregation]
    policy: SlidePolicy
    storage: Storage
    slide: _duration_pb2.Duration
    slide_rows: int
    def __init__(self, stream: _Optional[str] = ..., name: _Optional[str] = ..., algorithm: _Optional[_Union[Algorithm, str]] = ..., aggregations: _Optional[_Iterable[_Union[Aggregation, _Mapping]]] = ..., policy: _Optional[_Union[SlidePolicy, _Mapping]] = ..., storage: _Optional[_Union[Storage, _Mapping]] = ..., slide: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., slide_rows: _Optional[int] = ...) -> None: ...

class WindowStats(_message.Message):
    __slots__ = ("size", "levels", "inserted", "evicted", "bulk_evictions", "store_round_trips", "cache_misses", "late_rows", "policy_errors", "store_bytes_read", "store_bytes_written", "columnar_rows", "columnar_batches", "columnar_slices", "columnar_local_slices", "columnar_unwritten_slices")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    BULK_EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    STORE_ROUND_TRIPS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    LATE_ROWS_FIELD_NUMBER: _ClassVar[int]
    POLICY_ERRORS_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_BATCHES_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_SLICES_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_LOCAL_SLICES_FIELD_NUMBER: _ClassVar[int]
    COLUMNAR_UNWRITTEN_SLICES_FIELD_NUMBER: _ClassVar[int]
    size: int
    levels: int
    inserted: int
    evicted: int
    bulk_evictions: int
    store_round_trips: int
    cache_misses: int
    late_rows: int
    policy_errors: int
    store_bytes_read: int
    store_bytes_written: int
    columnar_rows: int
    columnar_batches: int
    columnar_slices: int
    columnar_local_slices: int
    columnar_unwritten_slices: int
    def __init__(self, size: _Optional[int] = ..., levels: _Optional[int] = ..., inserted: _Optional[int] = ..., evicted: _Optional[int] = ..., bulk_evictions: _Optional[int] = ..., store_round_trips: _Optional[int] = ..., cache_misses: _Optional[int] = ..., late_rows: _Optional[int] = ..., policy_errors: _Optional[int] = ..., store_bytes_read: _Optional[int] = ..., store_bytes_written: _Optional[int] = ..., columnar_rows: _Optional[int] = ..., columnar_batches: _Optional[int] = ..., columnar_slices: _Optional[int] = ..., columnar_local_slices: _Optional[int] = ..., columnar_unwritten_slices: _Optional[int] = ...) -> None: ...

class WindowInfo(_message.Message):
    __slots__ = ("spec", "stats", "outputs", "path", "storage", "plan")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    spec: WindowSpec
    stats: WindowStats
    outputs: _containers.RepeatedCompositeFieldContainer[OutputSpec]
    path: str
    storage: str
    plan: str
    def __init__(self, spec: _Optional[_Union[WindowSpec, _Mapping]] = ..., stats: _Optional[_Union[WindowStats, _Mapping]] = ..., outputs: _Optional[_Iterable[_Union[OutputSpec, _Mapping]]] = ..., path: _Optional[str] = ..., storage: _Optional[str] = ..., plan: _Optional[str] = ...) -> None: ...

class OutputSpec(_message.Message):
    __slots__ = ("name", "type", "parts")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: FieldType
    parts: _containers.RepeatedCompositeFieldContainer[FieldSpec]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[FieldType, str]] = ..., parts: _Optional[_Iterable[_Union[FieldSpec, _Mapping]]] = ...) -> None: ...

class DoubleList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...

class Int64List(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class BoolList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, values: _Optional[_Iterable[bool]] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, values: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name", "doubles", "ints", "strings", "bools", "timestamps", "values", "nulls")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOUBLES_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    BOOLS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    NULLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    doubles: DoubleList
    ints: Int64List
    strings: StringList
    bools: BoolList
    timestamps: Int64List
    values: ValueList
    nulls: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, name: _Optional[str] = ..., doubles: _Optional[_Union[DoubleList, _Mapping]] = ..., ints: _Optional[_Union[Int64List, _Mapping]] = ..., strings: _Optional[_Union[StringList, _Mapping]] = ..., bools: _Optional[_Union[BoolList, _Mapping]] = ..., timestamps: _Optional[_Union[Int64List, _Mapping]] = ..., values: _Optional[_Union[ValueList, _Mapping]] = ..., nulls: _Optional[_Iterable[bool]] = ...) -> None: ...

class Struct(_message.Message):
    __slots__ = ("fields",)
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.MessageMap[str, Value]
    def __init__(self, fields: _Optional[_Mapping[str, Value]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("null", "double_value", "int_value", "string_value", "bool_value", "timestamp_value", "struct_value", "list_value")
    NULL_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRUCT_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    null: bool
    double_value: float
    int_value: int
    string_value: str
    bool_value: bool
    timestamp_value: int
    struct_value: Struct
    list_value: ValueList
    def __init__(self, null: _Optional[bool] = ..., double_value: _Optional[float] = ..., int_value: _Optional[int] = ..., string_value: _Optional[str] = ..., bool_value: _Optional[bool] = ..., timestamp_value: _Optional[int] = ..., struct_value: _Optional[_Union[Struct, _Mapping]] = ..., list_value: _Optional[_Union[ValueList, _Mapping]] = ...) -> None: ...

class WindowResult(_message.Message):
    __slots__ = ("window", "values", "size", "evicted", "sequence", "timestamp", "key", "boundary")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BOUNDARY_FIELD_NUMBER: _ClassVar[int]
    window: str
    values: _containers.MessageMap[str, Value]
    size: int
    evicted: int
    sequence: int
    timestamp: int
    key: str
    boundary: int
    def __init__(self, window: _Optional[str] = ..., values: _Optional[_Mapping[str, Value]] = ..., size: _Optional[int] = ..., evicted: _Optional[int] = ..., sequence: _Optional[int] = ..., timestamp: _Optional[int] = ..., key: _Optional[str] = ..., boundary: _Optional[int] = ...) -> None: ...

class WindowRowResults(_message.Message):
    __slots__ = ("window", "columns", "sizes", "rows", "arrow_ipc")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    window: str
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    sizes: Int64List
    rows: Int64List
    arrow_ipc: bytes
    def __init__(self, window: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., sizes: _Optional[_Union[Int64List, _Mapping]] = ..., rows: _Optional[_Union[Int64List, _Mapping]] = ..., arrow_ipc: _Optional[bytes] = ...) -> None: ...

class ComputeRequest(_message.Message):
    __slots__ = ("stream", "windows", "arrow_ipc", "key_column", "context_rows")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    KEY_COLUMN_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ROWS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    windows: _containers.RepeatedScalarFieldContainer[str]
    arrow_ipc: bytes
    key_column: str
    context_rows: int
    def __init__(self, stream: _Optional[str] = ..., windows: _Optional[_Iterable[str]] = ..., arrow_ipc: _Optional[bytes] = ..., key_column: _Optional[str] = ..., context_rows: _Optional[int] = ...) -> None: ...

class ComputeResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[WindowRowResults]
    def __init__(self, results: _Optional[_Iterable[_Union[WindowRowResults, _Mapping]]] = ...) -> None: ...

class CreateStreamRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: StreamSpec
    def __init__(self, spec: _Optional[_Union[StreamSpec, _Mapping]] = ...) -> None: ...

class DeleteStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteStreamResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListStreamsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListStreamsResponse(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[StreamInfo]
    def __init__(self, streams: _Optional[_Iterable[_Union[StreamInfo, _Mapping]]] = ...) -> None: ...

class GetStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateWindowRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: WindowSpec
    def __init__(self, spec: _Optional[_Union[WindowSpec, _Mapping]] = ...) -> None: ...

class DeleteWindowRequest(_message.Message):
    __slots__ = ("stream", "name")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    stream: str
    name: str
    def __init__(self, stream: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteWindowResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWindowRequest(_message.Message):
    __slots__ = ("stream", "name")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    stream: str
    name: str
    def __init__(self, stream: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListWindowsRequest(_message.Message):
    __slots__ = ("stream",)
    STREAM_FIELD_NUMBER: _ClassVar[int]
    stream: str
    def __init__(self, stream: _Optional[str] = ...) -> None: ...

class ListWindowsResponse(_message.Message):
    __slots__ = ("windows",)
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    windows: _containers.RepeatedCompositeFieldContainer[WindowInfo]
    def __init__(self, windows: _Optional[_Iterable[_Union[WindowInfo, _Mapping]]] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("stream", "columns", "arrow_ipc", "producer_id", "sequence", "results", "windows", "continuation", "arrow_results", "rows")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    ARROW_RESULTS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    arrow_ipc: bytes
    producer_id: str
    sequence: int
    results: ResultMode
    windows: _containers.RepeatedScalarFieldContainer[str]
    continuation: bool
    arrow_results: bool
    rows: int
    def __init__(self, stream: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., arrow_ipc: _Optional[bytes] = ..., producer_id: _Optional[str] = ..., sequence: _Optional[int] = ..., results: _Optional[_Union[ResultMode, str]] = ..., windows: _Optional[_Iterable[str]] = ..., continuation: _Optional[bool] = ..., arrow_results: _Optional[bool] = ..., rows: _Optional[int] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("rows_applied", "rows_late", "rows_buffered", "duplicate", "results", "row_results")
    ROWS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    ROWS_LATE_FIELD_NUMBER: _ClassVar[int]
    ROWS_BUFFERED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ROW_RESULTS_FIELD_NUMBER: _ClassVar[int]
    rows_applied: int
    rows_late: int
    rows_buffered: int
    duplicate: bool
    results: _containers.RepeatedCompositeFieldContainer[WindowResult]
    row_results: _containers.RepeatedCompositeFieldContainer[WindowRowResults]
    def __init__(self, rows_applied: _Optional[int] = ..., rows_late: _Optional[int] = ..., rows_buffered: _Optional[int] = ..., duplicate: _Optional[bool] = ..., results: _Optional[_Iterable[_Union[WindowResult, _Mapping]]] = ..., row_results: _Optional[_Iterable[_Union[WindowRowResults, _Mapping]]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("stream", "window", "key", "range", "count")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    window: str
    key: str
    range: _duration_pb2.Duration
    count: int
    def __init__(self, stream: _Optional[str] = ..., window: _Optional[str] = ..., key: _Optional[str] = ..., range: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("stream", "window", "keys")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    window: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., window: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("stream", "prefix", "limit", "page_token")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    stream: str
    prefix: str
    limit: int
    page_token: str
    def __init__(self, stream: _Optional[str] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token", "groups")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[KeyInfo]
    next_page_token: str
    groups: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys: _Optional[_Iterable[_Union[KeyInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., groups: _Optional[_Iterable[int]] = ...) -> None: ...

class GetKeyRequest(_message.Message):
    __slots__ = ("stream", "key")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    stream: str
    key: str
    def __init__(self, stream: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteKeyRequest(_message.Message):
    __slots__ = ("stream", "key")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    stream: str
    key: str
    def __init__(self, stream: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class DeleteKeyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadResultsRequest(_message.Message):
    __slots__ = ("stream", "window", "after_sequence", "limit")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    window: str
    after_sequence: int
    limit: int
    def __init__(self, stream: _Optional[str] = ..., window: _Optional[str] = ..., after_sequence: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadResultsResponse(_message.Message):
    __slots__ = ("results", "latest_sequence")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    LATEST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[WindowResult]
    latest_sequence: int
    def __init__(self, results: _Optional[_Iterable[_Union[WindowResult, _Mapping]]] = ..., latest_sequence: _Optional[int] = ...) -> None: ...

class SubscribeEvent(_message.Message):
    __slots__ = ("batch", "result")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    batch: int
    result: WindowResult
    def __init__(self, batch: _Optional[int] = ..., result: _Optional[_Union[WindowResult, _Mapping]] = ...) -> None: ...

class ClusterMember(_message.Message):
    __slots__ = ("id", "address", "incarnation", "heartbeat_age_ms", "streams")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    incarnation: str
    heartbeat_age_ms: int
    streams: int
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., incarnation: _Optional[str] = ..., heartbeat_age_ms: _Optional[int] = ..., streams: _Optional[int] = ...) -> None: ...

class StreamOwner(_message.Message):
    __slots__ = ("stream", "member", "address", "token", "group_members")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    GROUP_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    member: str
    address: str
    token: int
    group_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[str] = ..., member: _Optional[str] = ..., address: _Optional[str] = ..., token: _Optional[int] = ..., group_members: _Optional[_Iterable[str]] = ...) -> None: ...

class GetClusterMapRequest(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, streams: _Optional[_Iterable[str]] = ...) -> None: ...

class ClusterMap(_message.Message):
    __slots__ = ("self", "members", "owners", "lease_ms", "view_age_ms", "isolated")
    SELF_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    VIEW_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    ISOLATED_FIELD_NUMBER: _ClassVar[int]
    self: str
    members: _containers.RepeatedCompositeFieldContainer[ClusterMember]
    owners: _containers.RepeatedCompositeFieldContainer[StreamOwner]
    lease_ms: int
    view_age_ms: int
    isolated: bool
    def __init__(self_, self: _Optional[str] = ..., members: _Optional[_Iterable[_Union[ClusterMember, _Mapping]]] = ..., owners: _Optional[_Iterable[_Union[StreamOwner, _Mapping]]] = ..., lease_ms: _Optional[int] = ..., view_age_ms: _Optional[int] = ..., isolated: _Optional[bool] = ...) -> None: ...
