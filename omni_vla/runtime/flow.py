"""The flow stage as a bundle ships it: flow_init -> N x flow_step -> flow_finish, chained here.

Why three programs instead of one unrolled graph: unrolled, XNNPACK packed a private copy of the shared
step weights for every Euler step (15 MB streamed per inference instead of 1.5 MB that stay in L2) and MNN
kept them as runtime-operand MatMuls instead of prepacked convolutions. One step program, called N times,
shares them. The chaining does no arithmetic: it moves buffers (all allocated here, once) between the
backend's programs, so every backend computes exactly what its programs compute.
"""
from __future__ import annotations

from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np

from omni_vla.runtime.bundle import BundleManifest

T = TypeVar("T")  # the backend's input type (numpy array or a zero-copy torch view of one)
# run(stage, inputs, fresh): outputs of `stage`; `fresh` lists the inputs that changed since the last call
# of that stage (None: all), so a backend that copies inputs into its own buffers can skip the rest.
Run = Callable[[str, Sequence[Any], "tuple[int, ...] | None"], Sequence[Any]]


class SteppedFlow(Generic[T]):
    """Chains a bundle's flow programs; `wrap` turns this object's numpy buffers into backend inputs once."""

    def __init__(self, manifest: BundleManifest, run: Run, wrap: Callable[[np.ndarray], T],
                 copy: Callable[[T, Any], None]) -> None:
        st = manifest.stages
        self.num_steps = manifest.num_steps
        self._run, self._copy = run, copy
        init_out = [t.name for t in st["flow_init"].outputs]
        kv_specs = st["flow_step"].inputs[3:]
        self._kv_from = [init_out.index(t.name) for t in kv_specs]  # the manifest validator checked the names
        self._bufs = [np.zeros(st["flow_init"].outputs[0].shape, np.float32)]
        self._bufs += [np.zeros(t.shape, np.float32) for t in kv_specs]
        self._one_hot_np = np.eye(self.num_steps, dtype=np.float32)[:, None, :]
        self._x, *self._kv = [wrap(b) for b in self._bufs]
        self._one_hot = [wrap(self._one_hot_np[i]) for i in range(self.num_steps)]
        self._fresh_x = (0, 2)

    def __call__(self, context: T, state: T, noise: T, prefix: T, prefix_mask: T) -> Any:
        """Actions [1,H,D] (the backend's output buffer: read it before the next call)."""
        outs = self._run("flow_init", (context, state, noise, prefix, prefix_mask), None)
        self._copy(self._x, outs[0])
        for buf, j in zip(self._kv, self._kv_from):
            self._copy(buf, outs[j])
        inputs: list[Any] = [self._x, prefix_mask, self._one_hot[0], *self._kv]
        for i in range(self.num_steps):
            inputs[2] = self._one_hot[i]
            self._copy(self._x, self._run("flow_step", inputs, None if i == 0 else self._fresh_x)[0])
        return self._run("flow_finish", (self._x, state, prefix, prefix_mask), None)[0]
