"""A content-addressed cache of ExecuTorch lowerings, used only when OMNI_VLA_LOWERING_CACHE names a directory.

Lowering an exported program (`to_edge_transform_and_lower` + `to_executorch`) is a deterministic function of the
program (graph, tensor shapes, weights), the delegate, the library versions and this project's lowering code; it is
also most of an import's time (minutes for a quantised VLA at test size). The key hashes all of those, so a hit is the
program the lowering would have written; anything that cannot be hashed is lowered afresh. The test suite sets the
variable (tests/conftest.py); imports and benchmarks that time an export leave it unset.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable

import torch

from omni_vla.backends import LIBRARY_OF
from omni_vla.runtime.bundle import installed_version

ENV = "OMNI_VLA_LOWERING_CACHE"
LIBRARIES = (torch.__name__, LIBRARY_OF["executorch"], "torchao", "openvino", "nncf")  # what a lowering runs on
KEEP_BYTES = 4 << 30  # beyond this the least recently used entries go


def cache_dir() -> Path | None:
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def _hash_tensor(h: "hashlib._Hash", t: torch.Tensor) -> None:
    """Dtype, shape, strides and bytes; a tensor subclass (torchao's quantised weights) by its flattened parts."""
    h.update(f"{type(t).__name__}:{t.dtype}:{tuple(t.shape)}\n".encode())
    if type(t) in (torch.Tensor, torch.nn.Parameter):
        flat = t.detach().contiguous().reshape(-1)
        h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        return
    flatten = getattr(t, "__tensor_flatten__", None)
    if flatten is None:
        raise TypeError(f"cannot hash a {type(t).__name__}")
    names, context = flatten()
    h.update(repr(context).encode())
    for name in names:
        h.update(name.encode())
        _hash_tensor(h, getattr(t, name))


def program_key(ep: torch.export.ExportedProgram, delegate: str, code: tuple[Path, ...]) -> str | None:
    """The lowering's inputs as one digest, or None when some input cannot be hashed (then nothing is cached)."""
    h = hashlib.sha256()
    h.update(ep.graph_module.code.encode())
    h.update(str(ep.graph_signature).encode())
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        h.update(f"{node.name}:{getattr(val, 'dtype', None)}:{tuple(getattr(val, 'shape', ()))}\n".encode())
    try:
        for name, t in sorted({**ep.state_dict, **ep.constants}.items()):
            h.update(name.encode())
            _hash_tensor(h, t)
    except (TypeError, RuntimeError):
        return None
    h.update(delegate.encode())
    h.update(repr([(lib, installed_version(lib)) for lib in LIBRARIES]).encode())
    for path in code:
        h.update(path.read_bytes())
    return h.hexdigest()


def _prune(root: Path) -> None:
    entries = sorted(root.glob("*.pte"), key=lambda p: p.stat().st_atime, reverse=True)
    total = 0
    for entry in entries:
        total += entry.stat().st_size
        if total > KEEP_BYTES:
            entry.unlink(missing_ok=True)


def lowered(key: str | None, lower: Callable[[], bytes]) -> bytes:
    """The cached program for `key`, else `lower()` (stored atomically when the cache is on)."""
    root = cache_dir()
    if root is None or key is None:
        return lower()
    hit = root / f"{key}.pte"
    if hit.is_file():
        os.utime(hit)
        return hit.read_bytes()
    data = lower()
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=root, suffix=".part")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, hit)
    _prune(root)
    return data
