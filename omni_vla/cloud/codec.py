"""OpenPI's msgpack encoding of numpy values, written from the format (openpi-client pins numpy<2).

Wire format (openpi `msgpack_numpy`): msgpack 1.x with bin/str types kept apart;
an ndarray travels as the map {b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str,
b"shape": [dims]} and a numpy scalar as {b"__npgeneric__": True, b"data": item, b"dtype": str}
(the marker keys are msgpack *bin*, so they decode as bytes). Object, void and complex dtypes are
refused both ways. Decoded arrays are read-only views on the received message (no copy).

Decoding is defensive because the bytes come off a network: a malformed array map, a dtype we
refuse or a data length that does not match the shape raises CodecError naming what was wrong.
"""
from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

REFUSED_KINDS = frozenset("VOc")  # void (structured), object, complex
ND_KEY = b"__ndarray__"
GENERIC_KEY = b"__npgeneric__"
MAX_DIMS = 32


class CodecError(ValueError):
    """A value that cannot be encoded, or bytes that are not a valid OpenPI message."""


def _refuse(dtype: np.dtype, where: str) -> None:
    if dtype.kind in REFUSED_KINDS or dtype.hasobject:
        raise CodecError(f"{where}: dtype {dtype} (kind {dtype.kind!r}) is not allowed (object/void/complex)")


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        _refuse(obj.dtype, "cannot encode array")
        return {ND_KEY: True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        _refuse(obj.dtype, "cannot encode scalar")
        return {GENERIC_KEY: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise CodecError(f"cannot encode a value of type {type(obj).__name__}")


def _dtype(value: Any) -> np.dtype:
    if not isinstance(value, str):
        raise CodecError(f"array dtype must be a string, got {type(value).__name__}")
    try:
        dtype = np.dtype(value)
    except TypeError as exc:
        raise CodecError(f"unknown dtype {value!r}") from exc
    _refuse(dtype, "cannot decode")
    return dtype


def _decode(obj: dict) -> Any:
    if ND_KEY in obj:
        data, shape = obj.get(b"data"), obj.get(b"shape")
        dtype = _dtype(obj.get(b"dtype"))
        if not isinstance(data, bytes):
            raise CodecError(f"array data must be bytes, got {type(data).__name__}")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
            raise CodecError(f"array shape must be a list of non-negative ints, got {shape!r}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dtype.itemsize != len(data):
            raise CodecError(
                f"array data is {len(data)} bytes but shape {shape} of {dtype} needs {count * dtype.itemsize}"
            )
        arr = np.frombuffer(data, dtype=dtype, count=count).reshape(shape)
        return arr  # frombuffer on bytes: read-only
    if GENERIC_KEY in obj:
        dtype = _dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError) as exc:
            raise CodecError(f"bad numpy scalar of dtype {dtype}: {exc}") from exc
    return obj


def packb(obj: Any) -> bytes:
    """Encode a message (dicts, lists, str, numbers, numpy arrays and scalars)."""
    try:
        return msgpack.packb(obj, default=_encode, use_bin_type=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot encode message: {exc}") from exc


def unpackb(data: bytes) -> Any:
    """Decode one message; CodecError on anything that is not a valid OpenPI msgpack message."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"expected a binary message, got {type(data).__name__}")
    try:
        return msgpack.unpackb(bytes(data), object_hook=_decode, raw=False)
    except CodecError:
        raise
    except (msgpack.UnpackException, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise CodecError(f"not a valid msgpack message: {type(exc).__name__}: {exc}") from exc
