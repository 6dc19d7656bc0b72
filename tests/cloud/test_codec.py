"""The OpenPI msgpack-numpy wire format, checked byte for byte against the format itself."""
from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from omni_vla.cloud import codec


def test_ndarray_travels_as_the_openpi_map_with_bytes_keys():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    raw = msgpack.unpackb(codec.packb({"actions": arr}), raw=False)
    enc = raw["actions"]
    assert set(enc) == {b"__ndarray__", b"data", b"dtype", b"shape"}  # marker keys are msgpack bin
    assert enc[b"__ndarray__"] is True
    assert enc[b"data"] == arr.tobytes()
    assert enc[b"dtype"] == "<f4"  # dtype.str, a msgpack str
    assert enc[b"shape"] == [2, 3]


def test_encoding_is_byte_identical_to_a_hand_built_openpi_message():
    arr = np.array([[1.5, -2.0]], dtype=np.float64)
    expected = msgpack.packb(
        {"prompt": "hi", "a": {b"__ndarray__": True, b"data": arr.tobytes(), b"dtype": "<f8", b"shape": [1, 2]}},
        use_bin_type=True,
    )
    assert codec.packb({"prompt": "hi", "a": arr}) == expected


def test_numpy_scalars_travel_as_npgeneric():
    raw = msgpack.unpackb(codec.packb(np.float32(0.25)), raw=False)
    assert raw == {b"__npgeneric__": True, b"data": 0.25, b"dtype": "<f4"}
    back = codec.unpackb(codec.packb({"x": np.int16(-7), "b": np.bool_(True)}))
    assert back["x"] == -7 and back["x"].dtype == np.int16
    assert back["b"] == True and isinstance(back["b"], np.bool_)  # noqa: E712


@pytest.mark.parametrize("value", [
    np.array(1.0), np.array([1, 2, 3], dtype=np.int32), np.array(["asdf", "qwer"]),
    np.array([True, False]), np.zeros((3, 4, 5), np.uint8), np.array([np.nan, np.inf, -np.inf]),
    np.zeros((0, 8), np.float32),
])
def test_round_trip_keeps_dtype_shape_and_values(value):
    back = codec.unpackb(codec.packb({"v": value, "nested": [value]}))
    for got in (back["v"], back["nested"][0]):
        assert got.dtype == value.dtype and got.shape == value.shape
        assert np.array_equal(got, value, equal_nan=value.dtype.kind == "f")


@pytest.mark.parametrize("value", [
    np.array([1 + 2j]), np.complex64(1j), np.array([object()], dtype=object),
    np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]),
])
def test_object_void_and_complex_are_refused_when_encoding(value):
    with pytest.raises(codec.CodecError, match="not allowed"):
        codec.packb({"v": value})


@pytest.mark.parametrize("dtype", ["<c16", "|O", "|V8"])
def test_object_void_and_complex_are_refused_when_decoding(dtype):
    msg = msgpack.packb({b"__ndarray__": True, b"data": b"\0" * 16, b"dtype": dtype, b"shape": [1]}, use_bin_type=True)
    with pytest.raises(codec.CodecError):
        codec.unpackb(msg)


def test_decoded_arrays_are_read_only_views():
    back = codec.unpackb(codec.packb(np.ones((2, 8))))
    assert not back.flags.writeable
    with pytest.raises(ValueError):
        back[0, 0] = 2.0


@pytest.mark.parametrize("enc, what", [
    ({b"__ndarray__": True, b"data": b"\0" * 12, b"dtype": "<f8", b"shape": [2]}, "bytes but shape"),
    ({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "<f8", b"shape": [-1]}, "shape"),
    ({b"__ndarray__": True, b"data": "text", b"dtype": "<f8", b"shape": [1]}, "data must be bytes"),
    ({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": 5, b"shape": [1]}, "dtype must be a string"),
    ({b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "nonsense", b"shape": [1]}, "unknown dtype"),
])
def test_malformed_array_maps_are_refused_with_the_reason(enc, what):
    with pytest.raises(codec.CodecError, match=what):
        codec.unpackb(msgpack.packb({"actions": enc}, use_bin_type=True))


@pytest.mark.parametrize("data", [b"\xc1\xc1\xc1", b"\x92\x01", b"{\"json\": true}\x00", "a text frame"])
def test_non_msgpack_input_is_refused(data):
    with pytest.raises(codec.CodecError):
        codec.unpackb(data)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(dtype=st.sampled_from([np.float32, np.float64, np.int64, np.uint8]),
                  shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)))
def test_any_numeric_array_round_trips_bit_exactly(arr):
    back = codec.unpackb(codec.packb(arr))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()
