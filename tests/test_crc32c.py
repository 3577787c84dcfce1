"""CRC-32C: the native implementation (google-crc32c, when installed) and the numpy fallback agree."""
import numpy as np
import pytest

from inputpipe.utils import crc32c as crc_module
from inputpipe.utils.crc32c import crc32c, crc32c_fallback, masked_crc32c

KNOWN = [(b"", 0), (b"123456789", 0xE3069283), (bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43)]


@pytest.mark.parametrize("data,expected", KNOWN)
def test_both_implementations_give_the_known_values(data, expected):
    assert crc32c(data) == expected
    assert crc32c_fallback(data) == expected


@pytest.mark.parametrize("size", [1, 7, 1023, 1024, 4099, 1 << 20])
def test_every_buffer_kind_gives_the_fallbacks_value(size):
    data = np.random.RandomState(size).bytes(size)
    expected = crc32c_fallback(data)
    for buffer in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        assert crc32c(buffer) == expected


def test_masked_crc_of_a_tfrecord_length_field():
    # The masked CRC of the 8-byte little-endian length 3, as TFRecord writers store it.
    length = (3).to_bytes(8, "little")
    crc = crc32c(length)
    assert masked_crc32c(length) == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_native_implementation_is_used_when_installed():
    google_crc32c = pytest.importorskip("google_crc32c")
    if google_crc32c.implementation != "c":
        pytest.skip("google-crc32c is installed without its compiled extension")
    assert crc_module._native is google_crc32c.value
