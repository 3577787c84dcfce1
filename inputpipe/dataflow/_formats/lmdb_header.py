"""An LMDB file checked against its own header before LMDB maps it.

LMDB maps the whole file and trusts its two meta pages (pages 0 and 1): a file that is shorter
than they say (truncated by a copy, a full disk, a download) is read past its end through the
map, and the process dies of SIGBUS with no Python error. This module reads the meta pages
itself, as LMDB 0.9 does (both must be meta pages with LMDB's magic and data version 1; the one of
the later transaction is used), and says what is wrong when the file cannot hold the pages that
meta page declares in use, or its roots lie beyond them.

Layout (64-bit LMDB, native byte order): a page header of 16 bytes (page number, pad, flags, lower,
upper), then the meta: magic, version, map address, map size, two database records (free pages,
main; the free-page record's first field is the page size), the last used page and the
transaction id.

Example::

    problem = lmdb_file_problem("/data/train.lmdb")
    if problem:
        raise ValueError(problem)
"""
import os
import struct
from typing import NamedTuple, Optional, Union

__all__ = ["lmdb_file_problem"]

_PAGE_HEADER = struct.Struct("=QHHHH")
_P_META = 0x08
_MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
_DB = "IHHQQQQQ"  # pad (page size in the free-page record), flags, depth, branch/leaf/overflow pages, entries, root
_META = struct.Struct("=IIQQ" + _DB + _DB + "QQ")
_NO_PAGE = (1 << 64) - 1  # the root of an empty database
_PAGE_SIZES = [1 << n for n in range(9, 17)]  # 512 .. 65536: the page sizes LMDB may have written


class _Meta(NamedTuple):
    page_size: int
    free_root: int
    main_root: int
    last_page: int
    txnid: int


def _read_meta(f, offset: int, index: int) -> Union[_Meta, str]:
    """The meta of the page at ``offset``, or what is wrong with it."""
    f.seek(offset)
    raw = f.read(_PAGE_HEADER.size + _META.size)
    if len(raw) < _PAGE_HEADER.size + _META.size:
        return "meta page {} at byte {} is cut off ({} of its {} bytes are in the file)".format(
            index, offset, len(raw), _PAGE_HEADER.size + _META.size)
    flags = _PAGE_HEADER.unpack_from(raw)[2]
    fields = _META.unpack_from(raw, _PAGE_HEADER.size)
    magic, version = fields[0], fields[1]
    if not flags & _P_META or magic != _MAGIC:
        return ("page {} (byte {}) is not an LMDB meta page: expected the flag 0x08 and the magic 0x{:X} "
                      "(a 64-bit LMDB file), found the flags 0x{:X} and 0x{:X}".format(
                          index, offset, _MAGIC, flags, magic))
    if version != _DATA_VERSION:
        return "meta page {} declares LMDB data version {}, expected {}".format(index, version, _DATA_VERSION)
    return _Meta(page_size=fields[4], free_root=fields[11], main_root=fields[19], last_page=fields[20],
                 txnid=fields[21])


def lmdb_file_problem(data_file: str) -> Optional[str]:
    """What makes the LMDB file ``data_file`` unsafe to map (truncated, or a damaged header), or None."""
    with open(data_file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = _read_meta(f, 0, 0)
        if isinstance(first, str):
            return "not an LMDB file, or truncated: " + first
        page_size = first.page_size
        if page_size not in _PAGE_SIZES:
            return "damaged header: meta page 0 declares a page size of {} bytes, expected a power of 2 from 512 to " \
                   "65536".format(page_size)
        second = _read_meta(f, page_size, 1)
        if isinstance(second, str):
            return "truncated or damaged header: " + second
        if second.page_size != page_size:
            return "damaged header: meta page 1 declares a page size of {} bytes, meta page 0 {} bytes".format(
                second.page_size, page_size)
    # LMDB uses the meta page of the later transaction (page 0 on a tie).
    index, meta = (1, second) if second.txnid > first.txnid else (0, first)
    needed = (meta.last_page + 1) * page_size
    if size < needed:
        return ("truncated: its header (meta page {}, transaction {}) says it holds {} pages of {} bytes ({} bytes), "
                "the file has {} bytes".format(index, meta.txnid, meta.last_page + 1, page_size, needed, size))
    for name, root in (("free-page", meta.free_root), ("main", meta.main_root)):
        if root != _NO_PAGE and not 2 <= root <= meta.last_page:
            return ("damaged header: meta page {} puts the root of the {} database at page {}, outside the pages "
                    "2..{} it says are in use".format(index, name, root, meta.last_page))
    return None
