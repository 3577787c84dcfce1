"""CRC-32C (Castagnoli), the checksum of TFRecord files.

When ``google-crc32c`` is installed (the ``crc32c`` extra: ``pip install "inputpipe[crc32c]"``)
its native implementation is used, at gigabytes per second. Otherwise a pure Python and numpy
fallback computes the same values:

Short inputs use the classic byte-at-a-time table loop. Longer inputs are cut into many lanes of
equal length whose CRCs numpy computes side by side (one vectorised table step per byte
position), then the lane CRCs are combined pairwise with cached "append 2**k zero bytes"
operators. About 40x faster than the plain loop on megabyte records.

Example::

    from inputpipe.utils.crc32c import crc32c, masked_crc32c
    assert crc32c(b"123456789") == 0xE3069283
    masked_crc32c(b"record")       # the form stored in TFRecord files
"""
from types import ModuleType
from typing import Callable, Dict, List, Optional

import numpy as np

_google_crc32c: Optional[ModuleType]
try:
    import google_crc32c as _google_crc32c
except ImportError:  # the extra is not installed: the numpy fallback below is used
    _google_crc32c = None

__all__ = ["crc32c", "crc32c_fallback", "masked_crc32c"]

_POLY = 0x82F63B78  # reflected Castagnoli polynomial
_MAX_LANE_BYTES = 256
_NUMPY_MIN_BYTES = 1024


def _byte_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLY if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _byte_table()
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)

# A linear operator on the 32-bit CRC register, as the images of its 32 basis bits.
Operator = List[int]


def _apply(op: Operator, value: int) -> int:
    result, bit = 0, 0
    while value:
        if value & 1:
            result ^= op[bit]
        value >>= 1
        bit += 1
    return result


def _square(op: Operator) -> Operator:
    return [_apply(op, column) for column in op]


def _byte_tables(op: Operator) -> np.ndarray:
    """Tables (4, 256) such that op(x) = T[0][x & 255] ^ T[1][(x >> 8) & 255] ^ ..."""
    tables = np.zeros((4, 256), dtype=np.uint32)
    for position in range(4):
        for bit in range(8):
            low = 1 << bit
            tables[position, low:2 * low] = tables[position, :low] ^ np.uint32(op[8 * position + bit])
    return tables


# _zero_operators[k] appends 2**k zero bytes to the register; each is the square of the last.
_zero_operators: List[Operator] = [[_TABLE[(1 << k) & 0xFF] ^ ((1 << k) >> 8) for k in range(32)]]
_zero_tables: Dict[int, np.ndarray] = {}


def _zero_table(log2_zeros: int) -> np.ndarray:
    """Byte tables of the operator that appends ``2**log2_zeros`` zero bytes (cached)."""
    tables = _zero_tables.get(log2_zeros)
    if tables is None:
        while len(_zero_operators) <= log2_zeros:
            _zero_operators.append(_square(_zero_operators[-1]))
        tables = _zero_tables[log2_zeros] = _byte_tables(_zero_operators[log2_zeros])
    return tables


def _crc32c_loop(data: memoryview, crc: int = 0) -> int:
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_lanes(data: memoryview) -> int:
    n = len(data)
    # Each byte position of a lane is one numpy step over all lanes: short lanes for short data
    # (fewer steps), up to _MAX_LANE_BYTES for long data (fewer, longer steps).
    lane_bytes = min(_MAX_LANE_BYTES, 1 << max(4, (n // 64).bit_length() - 1))
    lanes = -(-n // lane_bytes)
    padded = np.zeros(lanes * lane_bytes, dtype=np.uint8)
    # Leading zero bytes do not change a CRC whose register starts at 0, and starting the
    # register at 0xFFFFFFFF equals inverting the first four data bytes with a zero register.
    start = len(padded) - n
    padded[start:] = np.frombuffer(data, dtype=np.uint8)
    padded[start:start + 4] ^= 0xFF
    columns = np.ascontiguousarray(padded.reshape(lanes, lane_bytes).T)  # (position, lane)
    state = np.zeros(lanes, dtype=np.uint32)
    index = np.empty(lanes, dtype=np.uint32)
    table = _TABLE_NP
    for column in columns:
        np.bitwise_xor(state, column, out=index)
        np.bitwise_and(index, 0xFF, out=index)
        state >>= 8
        state ^= table[index]
    log2_zeros = lane_bytes.bit_length() - 1  # the length of one lane, then doubling
    while len(state) > 1:
        if len(state) % 2:  # a zero lane in front changes nothing
            state = np.concatenate([np.zeros(1, dtype=np.uint32), state])
        tables = _zero_table(log2_zeros)
        head, tail = state[0::2], state[1::2]
        state = (tables[0][head & 0xFF] ^ tables[1][(head >> 8) & 0xFF] ^
                 tables[2][(head >> 16) & 0xFF] ^ tables[3][head >> 24] ^ tail)
        log2_zeros += 1
    return int(state[0]) ^ 0xFFFFFFFF


def _native_function() -> Optional[Callable[[bytes], int]]:
    """google-crc32c's ``value``, when it is installed with its compiled implementation."""
    if _google_crc32c is None or getattr(_google_crc32c, "implementation", "c") != "c":
        return None
    return _google_crc32c.value


_native = _native_function()


def crc32c_fallback(data) -> int:
    """CRC-32C computed without the native extension (what :func:`crc32c` uses when
    ``google-crc32c`` is missing).

    Example::

        assert crc32c_fallback(b"123456789") == crc32c(b"123456789")
    """
    view = memoryview(data).cast("B")
    if len(view) < _NUMPY_MIN_BYTES:
        return _crc32c_loop(view)
    return _crc32c_lanes(view)


def crc32c(data) -> int:
    """CRC-32C of a bytes-like object, as an int in [0, 2**32).

    Example::

        crc32c(b"123456789")   # 0xE3069283
    """
    if _native is not None:
        # The extension takes read-only buffers only; a uint8 view of any buffer is one, without a copy.
        # (google-crc32c's stubs say bytes)
        return _native(np.frombuffer(memoryview(data).cast("B"), np.uint8))  # type: ignore[arg-type]
    return crc32c_fallback(data)


def masked_crc32c(data) -> int:
    """The masked CRC-32C that TFRecord files store after each length and each record.

    Example::

        struct.pack("<I", masked_crc32c(record))
    """
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
