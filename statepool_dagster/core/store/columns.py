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
store's text, also takes UTF-8 ``bytes`` (checked, as Arrow checks them). A text column of
:class:`~.cells.TextCell` values (texts read from the store and left in Arrow) is copied from
theirs in Arrow alone.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import pyarrow as pa

from .cells import TextCell

_INT32_MAX = (1 << 31) - 1
# Bytes (or characters) of a large text: a cell this large leaves blocks as large behind in
# Arrow's allocator (the store hands them back, rows.py), and a column of text this long is
# copied, or encoded, piece by piece, never joined or encoded whole first (one more copy of
# a huge field). One text that long goes through pa.array (which then imports pandas, in
# that process alone): the stages' peak memory with a huge field is measured that way.
LARGE = 16 << 20
_SLICE = 1 << 20  # characters of a huge text encoded at a time


def records_table(records: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """``records`` as a table of ``schema`` (a key the schema lacks is left out, a field a
    record lacks is null), as ``pa.Table.from_pylist(records, schema=schema)``."""
    columns = [column([r.get(f.name) for r in records], f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap of ``values`` (None where none is null) and the null count."""
    nulls = values.count(None)
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


def _arrow(values: bytes | bytearray | array) -> pa.Buffer:
    """``values``' bytes copied into Arrow's memory, where ``pa.array`` puts a column (a table
    kept for a while then holds no Python object)."""
    raw = memoryview(values).cast("B")
    buffer = pa.allocate_buffer(len(raw))
    with memoryview(buffer).cast("B") as view:
        view[:] = raw
    return buffer


def column(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """One column of ``type_`` made of ``values`` (a list or tuple of Python objects, None for
    null). The common cases run at C speed: checked by the set of the values' types, then
    joined or packed whole."""
    n = len(values)
    validity, nulls = _validity(values)
    kinds = set(map(type, values)) - {type(None)}
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return _text_column(values, type_, kinds, validity, nulls)
    if pa.types.is_int64(type_) or pa.types.is_float64(type_):
        fill, code = (0, "q") if pa.types.is_int64(type_) else (0.0, "d")
        allowed = {int} if code == "q" else {int, float}
        if not kinds <= allowed:  # a bool, a str...: the per-value checks name it
            check = _integer if code == "q" else _real
            values = [None if v is None else check(v) for v in values]
        packed = array(code, [fill if v is None else v for v in values] if nulls else values)
        return pa.Array.from_buffers(type_, n, [validity, _arrow(packed)], nulls)
    if pa.types.is_boolean(type_):
        data = _bitmap([v is not None and _boolean(v) for v in values])
        return pa.Array.from_buffers(type_, n, [validity, data], nulls)
    if pa.types.is_list(type_):
        lists = [() if v is None else _sequence(v) for v in values]
        items = [item for items in lists for item in items]
        child = column(items, type_.value_type)
        offsets = _arrow(array("i", list(accumulate(map(len, lists), initial=0))))
        return pa.Array.from_buffers(type_, n, [validity, offsets], nulls, children=[child])
    if pa.types.is_struct(type_):
        dicts = [{} if v is None else _mapping(v) for v in values]
        children = [column([d.get(f.name) for d in dicts], f.type) for f in type_]
        return pa.Array.from_buffers(type_, n, [validity], nulls, children=children)
    return pa.array(values, type=type_)


def _text_column(
    values: Sequence[Any],
    type_: pa.DataType,
    kinds: set[type],
    validity: pa.Buffer | None,
    nulls: int,
) -> pa.Array:
    """A ``string`` (str values) or ``large_string`` (str, or UTF-8 ``bytes``) column; either
    of text cells (or str and cells)."""
    large = pa.types.is_large_string(type_)
    if TextCell in kinds:
        if kinds == {TextCell} and not nulls and len({cell.array.type for cell in values}) == 1:
            joined = pa.concat_arrays([cell.array for cell in values])
            data = joined.buffers()[2]
            if large or data is None or data.size <= _INT32_MAX:
                return joined.cast(type_)
        # rare: a null, a session's str among a run's cells, both text types, past 32-bit offsets
        values = [str(v) if type(v) is TextCell else v for v in values]
        kinds = set(map(type, values)) - {type(None)}
    as_bytes = large and kinds == {bytes}
    blank = b"" if as_bytes else ""
    pieces = [blank if v is None else v for v in values] if nulls else values
    if as_bytes:
        if not all(map(bytes.isascii, pieces)):  # ASCII is UTF-8; else checked as Arrow does
            for piece in pieces:
                piece.decode("utf-8")  # UnicodeDecodeError (a ValueError)
    elif kinds <= {str}:
        if sum(map(len, pieces)) >= LARGE:
            if max(map(len, pieces)) >= LARGE:
                return pa.array(values, type=type_)  # one huge text: Arrow's own copy of it
            data, lengths = _encoded(pieces)
            return _text_array(type_, lengths, data, validity, nulls, values)
        text = "".join(pieces)
        data = text.encode("utf-8")  # UnicodeEncodeError for a lone surrogate
        if len(data) == len(text):  # ASCII: each piece's length is its bytes'
            lengths = list(map(len, pieces))
            return _text_array(type_, lengths, _arrow(data), validity, nulls, values)
        pieces = [piece.encode("utf-8") for piece in pieces]
    else:  # mixed, or a value of another type: refused by the per-value checks
        pieces = [b"" if v is None else (_text(v) if large else _utf8(v)) for v in values]
    return _text_array(type_, list(map(len, pieces)), _joined(pieces), validity, nulls, values)


def _text_array(
    type_: pa.DataType,
    lengths: list[int],
    data: pa.Buffer,
    validity: pa.Buffer | None,
    nulls: int,
    values: Sequence[Any],
) -> pa.Array:
    """The text column of ``values``, of these byte ``lengths`` one after another in ``data``."""
    if not pa.types.is_large_string(type_) and data.size > _INT32_MAX:
        return pa.array(values, type=type_)  # past 32-bit offsets: Arrow's own chunks
    code = "q" if pa.types.is_large_string(type_) else "i"
    ends = array(code, list(accumulate(lengths, initial=0)))
    return pa.Array.from_buffers(type_, len(lengths), [validity, _arrow(ends), data], nulls)


def _encoded(texts: Sequence[str]) -> tuple[pa.Buffer, list[int]]:
    """``texts`` in UTF-8 one after another in Arrow's memory, and each one's length in bytes:
    encoded :data:`_SLICE` characters at a time, so a huge text is never held encoded whole
    in Python as well."""
    buffer = pa.allocate_buffer(sum(map(len, texts)), resizable=True)  # enough for ASCII
    lengths, at = [], 0
    for text in texts:
        start = at
        for i in range(0, len(text), _SLICE):
            chunk = text[i : i + _SLICE].encode("utf-8")  # UnicodeEncodeError: a lone surrogate
            if at + len(chunk) > buffer.size:
                buffer.resize(max(2 * buffer.size, at + len(chunk)))
            with memoryview(buffer).cast("B") as view:
                view[at : at + len(chunk)] = chunk
            at += len(chunk)
        lengths.append(at - start)
    buffer.resize(at)
    return buffer, lengths


def _joined(pieces: Sequence[bytes]) -> pa.Buffer:
    """``pieces`` one after another in Arrow's memory; a large total copied piece by piece,
    never joined in Python first (a huge field is then held twice, not three times)."""
    total = sum(map(len, pieces))
    if total < LARGE:
        return _arrow(b"".join(pieces))
    buffer = pa.allocate_buffer(total)
    with memoryview(buffer).cast("B") as view:
        at = 0
        for piece in pieces:
            view[at : at + len(piece)] = piece
            at += len(piece)
    return buffer


def _utf8(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {type(value).__name__}")
    return value.encode("utf-8")


def _text(value: Any) -> bytes:
    """A ``large_string`` value's UTF-8 bytes: bytes checked (as Arrow checks them), or text."""
    if type(value) is bytes:
        value.decode("utf-8")  # UnicodeDecodeError (a ValueError), as Arrow refuses it
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
