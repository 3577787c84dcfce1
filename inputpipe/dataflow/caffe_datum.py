"""A decoder of Caffe's ``Datum`` protobuf message (the values of Caffe LMDB files), written against
the protobuf wire format so no protobuf package is needed.

``Datum`` fields: 1 channels, 2 height, 3 width (int32), 4 data (bytes), 5 label (int32),
6 float_data (repeated float, packed or not), 7 encoded (bool). Unknown fields are skipped.

Example::

    from inputpipe.dataflow.caffe_datum import parse_datum
    datum = parse_datum(value)      # {"channels": 3, "height": 2, "width": 2, "data": b"...", ...}
"""
import struct
from typing import Any, Dict, Tuple

import numpy as np

__all__ = ["parse_datum", "datum_to_image"]

_INT_FIELDS = {1: "channels", 2: "height", 3: "width", 5: "label", 7: "encoded"}


def _varint(data: bytes, at: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint at byte {}".format(at))
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def _int32(value: int) -> int:
    """A protobuf int32 from its varint (negative values are 64-bit two's complement)."""
    value &= (1 << 64) - 1
    value = value - (1 << 64) if value >= 1 << 63 else value
    if not -2 ** 31 <= value < 2 ** 31:
        raise ValueError("int32 field out of range: {}".format(value))
    return value


def parse_datum(data: Any) -> Dict[str, Any]:
    """The fields of one serialized ``Datum`` (missing fields get protobuf's defaults); a
    ValueError describes malformed input.

    Example::

        parse_datum(bytes([0x08, 0x03, 0x28, 0x07]))["label"]   # 7
    """
    data = bytes(data)
    fields: Dict[str, Any] = {"channels": 0, "height": 0, "width": 0, "data": b"", "label": 0,
                              "float_data": [], "encoded": False}
    floats = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = _varint(data, at)
            if number in _INT_FIELDS:
                name = _INT_FIELDS[number]
                fields[name] = bool(value) if name == "encoded" else _int32(value)
        elif wire_type == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ValueError("field {} needs {} bytes, {} left".format(number, length, len(data) - at))
            chunk = data[at:at + length]
            at += length
            if number == 4:
                fields["data"] = chunk
            elif number == 6:
                if length % 4:
                    raise ValueError("packed float_data of {} bytes is not a multiple of 4".format(length))
                floats.append(chunk)
        elif wire_type == 5:
            if at + 4 > len(data):
                raise ValueError("truncated 32-bit field {}".format(number))
            if number == 6:
                floats.append(data[at:at + 4])
            at += 4
        elif wire_type == 1:
            if at + 8 > len(data):
                raise ValueError("truncated 64-bit field {}".format(number))
            at += 8
        else:
            raise ValueError("unsupported protobuf wire type {} (field {})".format(wire_type, number))
    if floats:
        joined = b"".join(floats)
        fields["float_data"] = list(struct.unpack("<%df" % (len(joined) // 4), joined))
    return fields


def datum_to_image(fields: Dict[str, Any]) -> np.ndarray:
    """The HWC image of a parsed ``Datum``: uint8 from ``data``, or float32 from ``float_data``.

    Example::

        image = datum_to_image(parse_datum(value))     # shape (height, width, channels)
    """
    c, h, w = fields["channels"], fields["height"], fields["width"]
    if fields["encoded"]:
        raise ValueError("the Datum holds an encoded (e.g. JPEG) image; decode fields['data'] with an image "
                         "library instead")
    if fields["data"]:
        flat = np.frombuffer(fields["data"], dtype=np.uint8)
    else:
        flat = np.asarray(fields["float_data"], dtype=np.float32)
    if min(c, h, w) < 0 or flat.size != c * h * w:
        raise ValueError("a Datum of {}x{}x{} (channels x height x width) holds {} values".format(c, h, w, flat.size))
    return flat.reshape(c, h, w).transpose(1, 2, 0).copy()
