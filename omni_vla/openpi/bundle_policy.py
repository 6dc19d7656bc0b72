"""An exported policy bundle as an OpenPI server policy (the same runtime the robot runs locally).

Reads the request's images/state/prompt under the configured keys, runs one full inference
(no pinned prefix: a cloud re-plan starts fresh) and returns {"actions": float32 [H, D]}.
The runtime is loaded through omni_vla.inference.open_runtime, i.e. omni_vla.runtime.bundle.
"""
from __future__ import annotations

import numpy as np

from omni_vla.openpi.config import KeyMap
from omni_vla.perception import PolicyImage


class BundlePolicy:
    def __init__(self, bundle_dir: str, backend: str = "mnn", threads: int = 1, keys: KeyMap | None = None,
                 seed: int = 0) -> None:
        from omni_vla.inference import open_runtime

        self.keys = keys or KeyMap()
        self.runtime = open_runtime(backend, str(bundle_dir), threads)
        rt = self.runtime
        s, h, d = rt.image_size, rt.horizon, rt.action_dim
        self._front_img, self._wrist_img = PolicyImage(s), PolicyImage(s)
        self.front = np.zeros((1, 3, s, s), np.float32)
        self.wrist = np.zeros((1, 3, s, s), np.float32)
        self.state = np.zeros((1, d), np.float32)
        self.prefix = np.zeros((1, h, d), np.float32)
        self.noise = np.zeros((1, h, d), np.float32)
        self.instruction = np.zeros((1, rt.embedding_dim), np.float32)
        self._prompt: str | None = None
        self._rng = np.random.default_rng(seed)
        self.metadata = {"policy": "bundle", "backend": backend, "action_horizon": h, "action_dim": d}

    def infer(self, obs: dict) -> dict:
        k = self.keys
        for key in (k.front, k.wrist, k.state, k.prompt):
            if key not in obs:
                raise ValueError(f"request has no {key!r}; keys: {sorted(map(str, obs))}")
        self._front_img(obs[k.front], self.front)
        self._wrist_img(obs[k.wrist], self.wrist)
        state = np.asarray(obs[k.state], dtype=np.float32)
        if state.shape != self.state.shape[1:]:
            raise ValueError(f"{k.state!r} has shape {state.shape}, expected {self.state.shape[1:]}")
        self.state[0] = state
        prompt = str(obs[k.prompt])
        if prompt != self._prompt:
            self.instruction[0] = self.runtime.encode_instruction(prompt)
            self._prompt = prompt
        self._rng.standard_normal(dtype=np.float32, out=self.noise)
        out = np.zeros((self.runtime.horizon, self.runtime.action_dim), np.float32)
        self.runtime.infer(self.front, self.wrist, self.state, self.instruction, self.prefix, 0, self.noise, out)
        return {"actions": out}

    def close(self) -> None:
        self.runtime.close()
