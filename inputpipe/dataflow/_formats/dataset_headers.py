"""The format tag every inputpipe dataset file carries (its container and layout version), and the
decoding of one record, shared by the serializers of :mod:`inputpipe.dataflow.serialize`."""
from typing import Any

from ...utils.serialize import WireFormatError, _loads_wire
from ..dataset_io import DatasetFormatError

#: Version of the dataset file layouts written here; files of other versions are refused.
DATASET_FORMAT_VERSION = 1

_TAG_KEY = "inputpipe_dataset"


def _header(container: str, **fields: Any) -> dict:
    header = {_TAG_KEY: container, "version": DATASET_FORMAT_VERSION}
    header.update(fields)
    return header


def _check_header(header: Any, container: str, what: str) -> dict:
    if not isinstance(header, dict) or _TAG_KEY not in header:
        raise DatasetFormatError("{}: not an inputpipe dataset file (no format tag)".format(what))
    if header[_TAG_KEY] != container:
        raise DatasetFormatError("{}: this is an inputpipe {!r} dataset file, expected {!r}; load it with "
                                 "the matching serializer".format(what, header[_TAG_KEY], container))
    if header.get("version") != DATASET_FORMAT_VERSION:
        raise DatasetFormatError("{}: dataset format version {!r}, this inputpipe reads version {}".format(
            what, header.get("version"), DATASET_FORMAT_VERSION))
    return header


def _decode_record(data: Any, what: str, index: int, copy: bool = False) -> Any:
    try:
        return _loads_wire(data, max_bytes=max(len(data), 1), copy=copy)
    except WireFormatError as err:
        raise DatasetFormatError("{}: record {} is corrupt: {}".format(what, index, err)) from None
