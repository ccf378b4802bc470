"""Python values into Arrow columns through their buffers, as ``pa.array`` and
``pa.Table.from_pylist`` would make them for the store's and the export's schemas.

pyarrow's conversion of Python objects (``pa.array``, ``from_pylist``) imports pandas the
first time it runs, to ask whether the objects are pandas': a build or an export, which
write Parquet from Python values, would load pandas for that alone. Their columns are
strings, 64-bit integers and floats, booleans, and lists and structs of them, whose Arrow
layout is a validity bitmap, offsets and bytes: made here from the values, they give the
array ``pa.array`` gives (the same values, nulls and types, one chunk a column). A type not
listed, or strings past 32-bit offsets, goes through ``pa.array``. Stricter than ``pa.array``
by design: a value of another type than its column's (a bool for a number, bytes for a
``string``) raises ``TypeError`` rather than being converted; a ``large_string`` column, the
store's text, also takes UTF-8 ``bytes`` (checked, as Arrow checks them).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import pyarrow as pa

_INT32_MAX = (1 << 31) - 1
# Characters of one text past which pa.array copies it (encoding it first would hold one
# more copy of a huge field for a moment); its first use then imports pandas.
LARGE_TEXT = 16 << 20


def records_table(records: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """``records`` as a table of ``schema`` (a key the schema lacks is left out, a field a
    record lacks is null), as ``pa.Table.from_pylist(records, schema=schema)``."""
    columns = [column([r.get(f.name) for r in records], f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of ``values`` (None where none is null) and the null count."""
    nulls = sum(1 for v in values if v is None)
    if not nulls:
        return None, 0
    return _bitmap([v is not None for v in values]), nulls


def _bitmap(flags: Sequence[bool]) -> pa.Buffer:
    """Arrow's bitmap of ``flags``: bit ``i`` of the buffer set where ``flags[i]`` is true."""
    bits = bytearray((len(flags) + 7) // 8 or 1)
    for i, flag in enumerate(flags):
        if flag:
            bits[i >> 3] |= 1 << (i & 7)
    return _arrow(bits)


def _offsets(lengths: Sequence[int]) -> pa.Buffer:
    return _arrow(array("i", [0, *accumulate(lengths)]))


def _arrow(values: bytearray | array) -> pa.Buffer:
    """``values``' bytes copied into Arrow's memory, where ``pa.array`` puts a column (a table
    kept for a while then holds no Python object)."""
    raw = memoryview(values).cast("B")
    buffer = pa.allocate_buffer(len(raw))
    with memoryview(buffer).cast("B") as view:
        view[:] = raw
    return buffer


def column(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """One column of ``type_`` made of ``values`` (Python objects, None for null)."""
    n = len(values)
    validity, nulls = _validity(values)
    if pa.types.is_string(type_):
        encoded = [b"" if v is None else _utf8(v) for v in values]
        size = sum(map(len, encoded))
        if size > _INT32_MAX:
            return pa.array(values, type=type_)
        data = pa.py_buffer(b"".join(encoded))
        return pa.Array.from_buffers(type_, n, [validity, _offsets(map(len, encoded)), data], nulls)
    if pa.types.is_large_string(type_):
        if any(type(v) is str and len(v) >= LARGE_TEXT for v in values):
            return pa.array(values, type=type_)  # copied once, not encoded first
        pieces = [b"" if v is None else _text(v) for v in values]  # bytes, or ASCII text
        ends = array("q", [0, *accumulate(map(len, pieces))])
        data = pa.allocate_buffer(ends[-1])  # in Arrow's memory, as pa.array puts it
        with memoryview(data).cast("B") as view:
            for start, end, piece in zip(ends[:-1], ends[1:], pieces, strict=True):
                view[start:end] = piece if type(piece) is bytes else piece.encode("ascii")
        return pa.Array.from_buffers(type_, n, [validity, _arrow(ends), data], nulls)
    if pa.types.is_int64(type_):
        data = _arrow(array("q", [0 if v is None else _integer(v) for v in values]))
        return pa.Array.from_buffers(type_, n, [validity, data], nulls)
    if pa.types.is_float64(type_):
        data = _arrow(array("d", [0.0 if v is None else _real(v) for v in values]))
        return pa.Array.from_buffers(type_, n, [validity, data], nulls)
    if pa.types.is_boolean(type_):
        data = _bitmap([v is not None and _boolean(v) for v in values])
        return pa.Array.from_buffers(type_, n, [validity, data], nulls)
    if pa.types.is_list(type_):
        lists = [() if v is None else _sequence(v) for v in values]
        items = [item for items in lists for item in items]
        child = column(items, type_.value_type)
        offsets = _offsets(map(len, lists))
        return pa.Array.from_buffers(type_, n, [validity, offsets], nulls, children=[child])
    if pa.types.is_struct(type_):
        dicts = [{} if v is None else _mapping(v) for v in values]
        children = [column([d.get(f.name) for d in dicts], f.type) for f in type_]
        return pa.Array.from_buffers(type_, n, [validity], nulls, children=children)
    return pa.array(values, type=type_)


def _utf8(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {type(value).__name__}")
    return value.encode("utf-8")


def _text(value: Any) -> bytes | str:
    """UTF-8 bytes (checked, as Arrow checks them), or text that is ASCII: its bytes' length."""
    if type(value) is bytes:
        if not value.isascii():  # ASCII is UTF-8, and isascii tells at memory speed
            value.decode("utf-8")  # UnicodeDecodeError (a ValueError), as Arrow refuses it
        return value
    if isinstance(value, str) and value.isascii():
        return value
    return _utf8(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, got {type(value).__name__}")
    return value


def _sequence(value: Any) -> Sequence[Any]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected a dict, got {type(value).__name__}")
    return value
