"""Checkpoint weights copied into a model one tensor at a time.

`load_file` materialises the whole file beside the model: a 3.3 B pi0 in fp32 would need 2 x 13 GB before the first
export step. Streaming from `safe_open` holds the model plus its largest tensor (the embedding, ~1 GB).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from safetensors import safe_open
from torch import nn

Rename = Callable[[str], "str | None"]


def prefix_rename(prefixes: tuple[tuple[str, str], ...], unused: tuple[str, ...] = ()) -> Rename:
    """A checkpoint name -> the model's name: the first matching prefix is replaced; names left starting with
    `unused` (heads never run at inference) map to None and are skipped."""
    def rename(key: str) -> str | None:
        for src, dst in prefixes:
            if key.startswith(src):
                key = dst + key[len(src):]
                break
        return None if key.startswith(unused) else key
    return rename


def stream_weights(model: nn.Module, path: str | Path, rename: Rename, what: str) -> None:
    """Copy every tensor of the safetensors file at `path` into `model` (cast to the parameter's dtype). A tensor the
    model lacks, a parameter the file lacks, or a shape that differs is a ValueError naming the first few."""
    own = model.state_dict()
    seen: set[str] = set()
    unexpected: list[str] = []
    shapes: list[str] = []
    with safe_open(str(path), framework="pt") as f, torch.no_grad():
        for key in f.keys():
            name = rename(key)
            if name is None:
                continue
            if name not in own:
                unexpected.append(key)
                continue
            tensor = f.get_tensor(key)
            if tuple(tensor.shape) != tuple(own[name].shape):
                shapes.append(f"{key} {tuple(tensor.shape)} vs {tuple(own[name].shape)}")
                continue
            own[name].copy_(tensor)
            seen.add(name)
            del tensor
    missing = [k for k in own if k not in seen]
    if missing or unexpected or shapes:
        raise ValueError(f"{what} does not match the architecture: missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]}, shapes {shapes[:5]}")
