"""An exported policy bundle as a `omni_vla.policy.Policy` (the same runtime the robot runs locally).

Reads the request's images/state/prompt under the configured keys, runs one full inference
(no pinned prefix: a cloud re-plan starts fresh) and returns {"actions": float32 [H, D]}.
The runtime is loaded through omni_vla.inference.client.open_runtime, i.e. omni_vla.runtime.bundle.
"""
from __future__ import annotations

import numpy as np

from omni_vla.core.perception import PolicyImage
from omni_vla.inference.client import RuntimeInputs, open_runtime
from omni_vla.policy import KeyMap


class BundlePolicy:
    def __init__(self, bundle_dir: str, backend: str = "mnn", threads: int = 1, keys: KeyMap | None = None,
                 seed: int = 0) -> None:
        self.keys = keys or KeyMap()
        self.runtime = open_runtime(backend, str(bundle_dir), threads)
        self.inputs = RuntimeInputs(self.runtime, seed)
        h, d = self.runtime.horizon, self.runtime.action_dim
        unmapped = [c.name for c in self.runtime.cameras if c.name not in self.keys.images]
        if unmapped:
            self.runtime.close()
            raise ValueError(f"the policy reads camera(s) {unmapped} but keys.images maps only "
                             f"{sorted(self.keys.images)}; expected a request key for each (serve-openpi: "
                             "--camera-key CAMERA=KEY)")
        self._images = [(self.keys.images[c.name], c.name, PolicyImage(c.height, c.width)) for c in self.runtime.cameras]
        self._prompt: str | None = None
        self.metadata = {"policy": "bundle", "backend": backend, "action_horizon": h, "action_dim": d}

    def reset(self) -> None:
        """No episode state beyond the cached instruction embedding, which stays valid."""

    def infer(self, obs: dict) -> dict:
        k, x = self.keys, self.inputs
        for key in (*(key for key, _, _ in self._images), k.state, k.prompt):
            if key not in obs:
                raise ValueError(f"request has no {key!r}; keys: {sorted(map(str, obs))}")
        for key, camera, convert in self._images:
            convert(obs[key], x.images[camera])
        state = np.asarray(obs[k.state], dtype=np.float32)
        if state.shape != x.state.shape[1:]:
            raise ValueError(f"{k.state!r} has shape {state.shape}, expected {x.state.shape[1:]}")
        x.state[0] = state
        prompt = str(obs[k.prompt])
        if prompt != self._prompt:
            x.instruction[0] = self.runtime.encode_instruction(prompt)
            self._prompt = prompt
        out = np.zeros((x.horizon, x.action_dim), np.float32)
        x.run(0, out)
        return {"actions": out}

    def close(self) -> None:
        self.runtime.close()
