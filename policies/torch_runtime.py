"""Eager PyTorch PolicyRuntime over a bundle's policy.pt: the reference for parity and the bench baseline.

`folded=True` runs both stages in the folded form the bundle's artifacts were exported from
(export_fold.py), so the bench can also state the runtimes' gain over eager on the same graph.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from omni_vla.runtime.base import BundleRuntimeBase
from omni_vla.runtime.bundle import BundleError, read_manifest, verify_artifact
from omni_vla_policies.export import load_checkpoint, policy_from_checkpoint
from omni_vla_policies.export_fold import folded as fold
from omni_vla_policies.export_fold import folded_prefix


class TorchRuntime(BundleRuntimeBase):
    backend = "torch"

    def __init__(self, bundle_dir: str | Path, num_threads: int = 1, folded: bool = False) -> None:
        bundle_dir = Path(bundle_dir)
        manifest = read_manifest(bundle_dir)
        if manifest.torch_checkpoint is None:
            raise BundleError(f"{bundle_dir}: bundle has no policy.pt (torch_checkpoint) for eager PyTorch")
        self._init_common(bundle_dir, manifest, num_threads)
        torch.set_num_threads(num_threads)
        self.model = policy_from_checkpoint(load_checkpoint(verify_artifact(bundle_dir, manifest.torch_checkpoint)))
        self.flow = fold(self.model.flow_head) if folded else self.model.flow_head
        self.prefix = folded_prefix(self.model.prefix_encoder) if folded else self.model.prefix_encoder
        if folded:
            self.backend = "torch-folded"
        self._mask_t = torch.from_numpy(self._mask)
        self._last: tuple[torch.Tensor, ...] | None = None

    @torch.inference_mode()
    def context(self, front: np.ndarray, wrist: np.ndarray, state: np.ndarray, instruction: np.ndarray) -> np.ndarray:
        """Prefix stage alone (for per-stage parity)."""
        t = torch.from_numpy
        return self.model.prefix_encoder(t(front), t(wrist), t(state), t(instruction)).numpy().copy()

    @torch.inference_mode()
    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        front, wrist = self._check_inputs(images, state, instruction, prefix, prefix_len, noise, out)
        t = torch.from_numpy
        self._set_mask(prefix_len)
        self._last = (t(front), t(wrist), t(state), t(instruction))
        a = self.flow(self.prefix(*self._last), self._last[2], t(noise), t(prefix), self._mask_t)
        np.copyto(out, a.numpy()[0])

    @torch.inference_mode()
    def run_prefix(self) -> None:
        """The prefix stage alone on the last infer()'s inputs (profiling: how the time splits)."""
        assert self._last is not None, "call infer() first"
        self.prefix(*self._last)

    @torch.inference_mode()
    def run_stages(self, front: np.ndarray, wrist: np.ndarray, state: np.ndarray, instruction: np.ndarray,
                   context: np.ndarray, noise: np.ndarray, prefix: np.ndarray, prefix_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Each stage on its own: (context from the images, actions from `context`)."""
        t = torch.from_numpy
        ctx = self.context(front, wrist, state, instruction)
        self._set_mask(prefix_len)
        act = self.flow(t(context), t(state), t(noise), t(prefix), self._mask_t).numpy()[0].copy()
        return ctx, act

    def close(self) -> None:
        pass
