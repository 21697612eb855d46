"""A source's metadata columns as it is written: each sample checked against the first one's keys and kinds."""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from torch_drt.cache._arrow_arrays import column_array
from torch_drt.cache._format import KIND_TO_ARROW, UID_KEY, kind_of, validate_column_name
from torch_drt.cache.records import CacheInput

_PY_TYPE = {"bool": bool, "int": int, "float": float, "string": str}


class BadInput(Exception):
    """A problem with what the source yielded; becomes the source's CacheWriteError message."""


def _coerce(value: object, kind: str) -> object:
    """Accept numpy scalars of the right kind; anything else of another kind is refused."""
    if kind_of(value) == kind:
        return value.item() if isinstance(value, np.generic) else value
    raise TypeError


def _schema_of(meta: Mapping[str, Any], index: int) -> list[tuple[str, str]]:
    if not isinstance(meta, Mapping):
        raise BadInput(f"sample {index}: metadata must be a mapping, got {type(meta).__name__}")
    schema = []
    for key in sorted(meta):
        try:
            validate_column_name(key)
        except ValueError as e:
            raise BadInput(f"sample {index}: {e}") from None
        kind = kind_of(meta[key])
        if kind is None:
            raise BadInput(
                f"sample {index}: metadata key {key!r} has unsupported type {type(meta[key]).__name__} "
                "(use bool, int, float or str)"
            )
        schema.append((key, kind))
    return schema


def _key_mismatch(meta: Mapping[str, Any], keys: frozenset[str], index: int) -> BadInput:
    if not isinstance(meta, Mapping):
        return BadInput(f"sample {index}: metadata must be a mapping, got {type(meta).__name__}")
    missing, extra = sorted(keys - set(meta)), sorted(set(meta) - keys)
    parts = [f"missing key(s) {missing}"] if missing else []
    parts += [f"unexpected key(s) {extra}"] if extra else []
    return BadInput(f"sample {index}: " + " and ".join(parts) + f" (the first sample has keys {sorted(keys)})")


class MetadataColumns:
    """Checks each sample against the first one's keys and kinds and collects the metadata columns."""

    def __init__(self) -> None:
        self.schema: list[tuple[str, str]] | None = None
        self._keys: frozenset[str] = frozenset()
        self._columns: list[tuple[str, str, type, list]] = []
        self._rows = 0
        self._values_of: Callable[[dict], Any] | None = None  # the common case's checks, set by the first sample
        self._types: Any = ()
        self._adds: list[Callable[[Any], None]] = []

    def payload(self, i: int, item: Any) -> bytes:
        """Check sample ``i`` and keep its metadata; return its payload as bytes.

        The common case (a ``CacheInput`` of bytes and a dict whose values have exactly the first sample's keys and
        Python types) takes a short path with the same checks; anything else, the full one (conversions, errors).
        """
        values_of = self._values_of
        if type(item) is CacheInput and values_of is not None:
            data, meta = item
            if type(data) is bytes and type(meta) is dict and meta.keys() == self._keys:
                values = values_of(meta)
                if type(values) is self._types:  # one column: its value
                    self._adds[0](values)
                    self._rows += 1
                    return data
                if type(values) is tuple and tuple(map(type, values)) == self._types:  # several columns, or none
                    for add, value in zip(self._adds, values):
                        add(value)
                    self._rows += 1
                    return data
        return self._checked(i, item)

    def _checked(self, i: int, item: Any) -> bytes:
        try:
            data, meta = item.data, item.metadata
        except AttributeError:
            raise BadInput(f"sample {i}: expected a CacheInput, got {type(item).__name__}") from None
        if type(data) is not bytes:
            if not isinstance(data, bytearray | memoryview):
                raise BadInput(
                    f"sample {i}: payload must be bytes-like (bytes, bytearray, memoryview), got {type(data).__name__}"
                )
            data = memoryview(data).tobytes()
        if self.schema is None:
            self.schema = _schema_of(meta, i)
            self._keys = frozenset(k for k, _ in self.schema)
            self._columns = [(k, kind, _PY_TYPE[kind], []) for k, kind in self.schema]
            self._adds = [values.append for *_, values in self._columns]
            keys = [k for k, _ in self.schema]
            if len(keys) == 1:
                self._values_of, self._types = operator.itemgetter(keys[0]), self._columns[0][2]
            else:  # a tuple of the values (``itemgetter`` of no key takes none: an empty tuple)
                getter = operator.itemgetter(*keys) if keys else None
                self._values_of = getter if getter is not None else (lambda meta: ())
                self._types = tuple(py_type for _, _, py_type, _ in self._columns)
        if (type(meta) is not dict and not isinstance(meta, Mapping)) or meta.keys() != self._keys:
            raise _key_mismatch(meta, self._keys, i)
        for key, kind, py_type, values in self._columns:
            value = meta[key]
            if type(value) is not py_type:
                try:
                    value = _coerce(value, kind)
                except TypeError:
                    raise BadInput(
                        f"sample {i}: metadata key {key!r} expected {kind}, got {type(value).__name__} ({value!r})"
                    ) from None
            values.append(value)
        self._rows += 1
        return data

    def _no_columns(self, metadata: dict[bytes, bytes] | None = None) -> pa.Table:
        """A table of no columns and one row per sample (``pa.table`` of no columns has no rows)."""
        batch = pa.RecordBatch.from_struct_array(pa.nulls(self._rows, pa.struct([])))
        return pa.Table.from_batches([batch], schema=pa.schema([], metadata=metadata))

    def encode(self, uid_of: Callable[[str], str]) -> tuple[str, pa.Buffer]:
        """The columns as the bytes of an Arrow IPC file that names its cache in its schema metadata, and that name.

        The name is ``uid_of(digest)``, ``digest`` being the SHA-256 of the columns' Arrow IPC stream without it (so
        a cache's identity can be derived from its content).
        """
        assert self.schema is not None
        fields = [pa.field(k, KIND_TO_ARROW[kind], nullable=False) for k, kind in self.schema]
        arrays = {k: column_array(v, KIND_TO_ARROW[kind]) for k, kind, _, v in self._columns}
        table = pa.table(arrays, schema=pa.schema(fields)) if fields else self._no_columns()
        digest = _Sha256Sink()
        with ipc.new_stream(pa.PythonFile(digest, mode="w"), table.schema) as w:
            w.write_table(table)
        uid = uid_of(digest.hexdigest())
        uid_key = {UID_KEY: uid.encode()}
        table = table.replace_schema_metadata(uid_key) if fields else self._no_columns(uid_key)
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        return uid, sink.getvalue()


def warm_up() -> None:
    """Encode a one-row table, so that this process has imported what a first ``encode`` imports (pyarrow's IPC
    writer; never pandas: ``column_array`` leaves out ``pa.array``'s pandas shim, about 0.3 s of CPU)."""
    columns = MetadataColumns()
    columns.payload(0, CacheInput(b"", {"label": 0}))
    columns.encode(lambda digest: digest)


class _Sha256Sink:
    """A write-only file that keeps only the SHA-256 of what is written to it."""

    closed = False

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
