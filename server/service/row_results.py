"""A window's per-row results of one batch (:class:`RowResults`), in the form the caller asks:
typed columns of Python values (protobuf's ``WindowRowResults.columns``) or one Arrow table
(``WindowRowResults.arrow_ipc``: :meth:`RowResults.arrow`, :func:`arrow_ipc`).

They come from the engine (each row's lifted aggregate, lowered here one output at a time) or
from the columnar shadow (a ``pyarrow.Table`` of the outputs, already lowered). Each form is
made on first use from whichever source there is, so an Arrow answer of the shadow's results
never becomes Python objects, and a protobuf answer never becomes Arrow.

The Arrow layout is the wire's (see ``WindowRowResults.arrow_ipc`` in windows.proto): one
column per output named as the output (a struct output as an Arrow struct of its parts), null
where the output had no value, then ``_size`` and ``_row``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mtawindows.v1.types import FieldType

if TYPE_CHECKING:
    import pyarrow as pa

    from .compiled import Output

__all__ = ["SIZE", "RowResults", "arrow_ipc", "arrow_type", "list_arrow_type"]

SIZE = "__size"  # the columns form's entry of the window's size after each row


def arrow_type(kind: str) -> pa.DataType | None:
    """The Arrow type of a result of FieldType ``kind`` (None: not typed, sent as JSON)."""
    import pyarrow as pa

    return {
        FieldType.DOUBLE.value: pa.float64(),
        FieldType.INT64.value: pa.int64(),
        FieldType.STRING.value: pa.string(),
        FieldType.BOOL.value: pa.bool_(),
        FieldType.TIMESTAMP.value: pa.timestamp("ns", tz="UTC"),
    }.get(kind)


def list_arrow_type(element: str | Sequence[tuple[str, str]]) -> pa.DataType:
    """The Arrow type of a list output whose elements are of FieldType ``element``, or structs
    of ``element``'s (part name, FieldType value) parts (top_k: item, count)."""
    import pyarrow as pa

    if isinstance(element, str):
        return pa.list_(arrow_type(element) or pa.string())
    return pa.list_(pa.struct([(p, arrow_type(t) or pa.string()) for p, t in element]))


class RowResults(Mapping[str, tuple[str, list[Any]]]):
    """Per-row results of one window and batch. As a mapping: column name -> (FieldType
    value, values) (struct outputs split into ``name.part``; ``"__size"``: the window's size
    after each row), as the protobuf columns carry them. :meth:`arrow`: the same as a
    ``pyarrow.Table``.

    Made from the engine's lifted totals (``lower``: the window's lowering of one output over
    a list of totals, :meth:`HostedWindow.columns`) or from a shadow's ``table``."""

    __slots__ = ("_columns", "_lower", "_outputs", "_sizes", "_table", "_totals")

    def __init__(
        self,
        outputs: Sequence[Output],
        sizes: Any,
        *,
        totals: list[Any] | None = None,
        lower: Any = None,
        table: pa.Table | None = None,
    ) -> None:
        self._outputs = outputs
        self._sizes = sizes  # a list, or a numpy array (the shadow's)
        self._totals = totals
        self._lower = lower
        self._table = table
        self._columns: dict[str, tuple[str, list[Any]]] | None = None

    # -- the columns form (a mapping, as AppendResult.row_results holds it)
    def typed(self) -> dict[str, tuple[str, list[Any]]]:
        """Column name -> (FieldType value, values), without the sizes."""
        if self._columns is None:
            self._columns = self._typed_columns()
        return self._columns

    def sizes(self) -> list[int]:
        s = self._sizes
        return s if isinstance(s, list) else s.tolist()

    def __getitem__(self, name: str) -> tuple[str, list[Any]]:
        if name == SIZE:
            return FieldType.INT64.value, self.sizes()
        return self.typed()[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.typed()
        yield SIZE

    def __len__(self) -> int:
        return len(self.typed()) + 1

    def __repr__(self) -> str:
        return f"RowResults({dict(self)!r})"

    def _typed_columns(self) -> dict[str, tuple[str, list[Any]]]:
        if self._table is not None:
            return self._columns_of_table()
        assert self._lower is not None and self._totals is not None
        cols: dict[str, tuple[str, list[Any]]] = self._lower(self._totals, self.sizes())
        return cols

    def _columns_of_table(self) -> dict[str, tuple[str, list[Any]]]:
        table = self._table
        assert table is not None
        cols: dict[str, tuple[str, list[Any]]] = {}
        size_list = self.sizes()
        empty = 0 in size_list
        for o in self._outputs:
            vs = table.column(o.name).to_pylist()
            if empty and o.nullable_when_empty:
                vs = [None if n == 0 else v for v, n in zip(vs, size_list, strict=True)]
            if o.split is None:
                cols[o.name] = (o.type, vs)
                continue
            for p, t in o.parts:
                cols[f"{o.name}.{p}"] = (t, [None if v is None else v[p] for v in vs])
        return cols

    # -- the Arrow form
    def arrow(self, rows: Sequence[int] | Any = None) -> pa.Table:
        """The results as an Arrow table (the wire's layout); ``rows``: the request's row of
        each entry (None: entry i is row i)."""
        import numpy as np
        import pyarrow as pa

        sizes = np.asarray(self._sizes, dtype=np.int64)
        n = len(sizes)
        arrays: list[pa.Array] = []
        fields: list[pa.Field] = []
        if self._table is not None:
            pairs = self._arrow_of_table(sizes)
        else:
            pairs = self._arrow_of_columns(n)
        for field, array in pairs:
            fields.append(field)
            arrays.append(array)
        fields += [pa.field("_size", pa.int64(), False), pa.field("_row", pa.int64(), False)]
        arrays.append(pa.array(sizes, pa.int64()))
        row = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        arrays.append(pa.array(row, pa.int64()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _arrow_of_table(self, sizes: Any) -> Iterator[tuple[pa.Field, pa.Array]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self._table
        assert table is not None
        empty = None
        for o in self._outputs:
            # a large batch's results come in chunks (ColumnarWindow._apply_chunks): kept as
            # they are (the IPC writer writes a record batch per chunk), but a struct's
            col = table.column(o.name)
            if col.num_chunks == 1:
                col = col.chunk(0)
            elif o.split is not None or not col.num_chunks:
                col = col.combine_chunks()
            if pa.types.is_null(col.type):  # no rows, nor any before: typed, empty
                parts = [(p, arrow_type(t) or pa.string()) for p, t in o.parts]
                kind = pa.struct(parts) if o.split is not None else arrow_type(o.type)
                col = pa.nulls(len(col), kind or pa.string())
            if o.split is None:
                want = arrow_type(o.type)
                if want is not None and col.type != want:
                    col = _cast(col, want)
            else:
                col = _struct_cast(col, o.parts)
            if o.nullable_when_empty and (sizes == 0).any():
                if empty is None:
                    empty = pa.array(sizes == 0)
                col = pc.if_else(empty, pa.scalar(None, col.type), col)
            yield pa.field(o.name, col.type), col

    def _arrow_of_columns(self, n: int) -> Iterator[tuple[pa.Field, pa.Array]]:
        import pyarrow as pa

        cols = self.typed()
        for o in self._outputs:
            if o.element is not None:  # a list output (quantiles, top_k)
                t = list_arrow_type(o.element)
                yield pa.field(o.name, t), pa.array(cols[o.name][1], t)
                continue
            if o.split is None:
                kind, values = cols[o.name]
                yield _typed_array(o.name, kind, values)
                continue
            children = []
            for p, t in o.parts:
                children.append(_typed_array(p, t, cols[f"{o.name}.{p}"][1])[1])
            first = cols[f"{o.name}.{o.parts[0][0]}"][1] if o.parts else [None] * n
            mask = pa.array([v is None for v in first], pa.bool_())
            names = [p for p, _ in o.parts]
            array = pa.StructArray.from_arrays(children, names=names, mask=mask)
            yield pa.field(o.name, array.type), array


def _typed_array(name: str, kind: str, values: list[Any]) -> tuple[pa.Field, pa.Array]:
    import pyarrow as pa

    t = arrow_type(kind)
    if t is None:  # a plugin's value the server cannot type: JSON text
        text = [None if v is None else json.dumps(v, default=str) for v in values]
        meta = {"mtawindows.encoding": "json"}
        return pa.field(name, pa.string(), metadata=meta), pa.array(text, pa.string())
    if pa.types.is_timestamp(t):
        return pa.field(name, t), pa.array(values, pa.int64()).cast(t)
    return pa.field(name, t), pa.array(values, t)


def _cast(col: pa.Array, want: pa.DataType) -> pa.Array:
    import pyarrow as pa

    if pa.types.is_timestamp(want) and pa.types.is_integer(col.type):
        return col.cast(pa.int64()).cast(want)
    return col.cast(want)


def _struct_cast(col: pa.Array, parts: Sequence[tuple[str, str]]) -> pa.Array:
    """A shadow's struct column with the parts' wire types, in the parts' order."""
    import pyarrow as pa

    children = []
    for p, t in parts:
        child = col.field(p)
        want = arrow_type(t)
        if want is not None and child.type != want:
            child = _cast(child, want)
        children.append(child)
    return pa.StructArray.from_arrays(
        children, names=[p for p, _ in parts], mask=col.is_null() if col.null_count else None
    )


def arrow_ipc(table: pa.Table) -> pa.Buffer:
    """``table`` as one Arrow IPC stream, in the buffer the writer filled (bytes-like: no
    copy into a ``bytes``; :func:`~..transport.wire.with_row_results` joins it into a reply)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()
