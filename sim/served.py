"""A policy served by its own code (OpenPI protocol) behind the robot's loop, beside its imported bundle.

Whether the loop, the runtimes and the import degrade a user's policy is only answered against the policy as its
authors run it. `ServedRuntime` is a PolicyRuntime whose chunks come from a server (for a LeRobot checkpoint:
tests/support/lerobot_server.py, LeRobot's own preprocessor -> predict_action_chunk -> postprocessor) and which runs
the imported bundle on the very same inputs at every call, so the per-step agreement is measured on identical
observations while the server's chunks drive the episode. `evaluate_served` runs the evaluation suite that way:
the same episodes, supervisor and counting as `omni-vla eval`, only the source of the chunks differs.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from omni_vla.cloud.config import ClientConfig
from omni_vla.cloud.policy import CloudPolicy
from omni_vla.inference.client import copy_runtime_shape
from omni_vla_sim import agents
from omni_vla_sim.eval import evaluate

FLOW_KINDS = ("smolvla", "pi0", "pi05")  # policies whose chunk depends on the initial noise: it is sent along


class ServedRuntime:
    """Chunks from the server; the bundle runtime's chunk on the same inputs is kept for the agreement figure."""

    def __init__(self, bundle_runtime: Any, url: str, checkpoint: Path, timeout_s: float = 30.0) -> None:
        config = json.loads((Path(checkpoint) / "config.json").read_text())
        self.features = tuple(config.get("input_features", {}))
        self.flow = config.get("type") in FLOW_KINDS
        self._rt = bundle_runtime
        copy_runtime_shape(self, bundle_runtime)
        self.backend = f"served ({config.get('type')})"
        self._policy = CloudPolicy(ClientConfig(uri=url, open_timeout_s=timeout_s, request_timeout_s=timeout_s))
        self._text = ""
        self._local = np.zeros((bundle_runtime.horizon, bundle_runtime.action_dim), np.float32)
        self.served: list[np.ndarray] = []
        self.imported: list[np.ndarray] = []
        self.states: list[np.ndarray] = []
        self.latencies_ms: list[float] = []

    def encode_instruction(self, text: str) -> np.ndarray:
        self._text = text
        return self._rt.encode_instruction(text)

    def request(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
                noise: np.ndarray) -> dict[str, Any]:
        """The raw observation under LeRobot's feature names, as the checkpoint's config lists them."""
        obs: dict[str, Any] = {"task": self._text}
        for key in self.features:
            if key.startswith("observation.images."):
                obs[key] = np.ascontiguousarray(images[key.rsplit(".", 1)[1]][0])
            elif key == "observation.state":
                obs[key] = np.ascontiguousarray(state[0])
            elif key == "observation.environment_state":
                obs[key] = np.ascontiguousarray(instruction[0])
        if self.flow:
            obs["noise"] = np.ascontiguousarray(noise[0])
        return obs

    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        if prefix_len:
            raise ValueError("a served policy has no committed prefix (real-time chunking): evaluate it with "
                             "strategy naive or average")
        self._rt.infer(images, state, instruction, prefix, 0, noise, self._local)
        reply = self._policy.infer(self.request(images, state, instruction, noise))
        actions = reply["actions"]
        if actions.shape != out.shape:
            raise ValueError(f"the server's chunk is {list(actions.shape)}, the bundle's {list(out.shape)}")
        out[:] = actions
        self.served.append(actions.copy())
        self.imported.append(self._local.copy())
        self.states.append(np.array(state[0], np.float32))

    def agreement(self) -> dict[str, Any]:
        return agreement(self.served, self.imported, self.states)

    def close(self) -> None:
        self._policy.close()
        self._rt.close()


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    """10 log10(|reference|^2 / |reference - other|^2); inf when identical."""
    err = float(np.sum((reference.astype(np.float64) - other) ** 2))
    return math.inf if err == 0.0 else 10.0 * math.log10(float(np.sum(reference.astype(np.float64) ** 2)) / err)


def agreement(served: list[np.ndarray], imported: list[np.ndarray], states: list[np.ndarray]) -> dict[str, Any]:
    """Per-step agreement of the imported bundle with the served policy over every chunk asked for: SNR of the
    joint targets, and of the targets minus the joint state (the motion, which raw positions would hide)."""
    if not served:
        return {"chunks": 0}
    a, b, s = np.stack(served), np.stack(imported), np.stack(states)[:, None, :]
    per_chunk = [snr_db(x, y) for x, y in zip(a - s, b - s)]
    return {"chunks": len(served), "snr_db": round(snr_db(a, b), 2), "snr_db_delta": round(snr_db(a - s, b - s), 2),
            "snr_db_delta_worst_chunk": round(min(per_chunk), 2), "max_abs": float(np.max(np.abs(a - b)))}


def evaluate_served(settings: Any, url: str, checkpoint: Path, out: Path | None = None) -> dict[str, Any]:
    """`omni-vla eval` with the server's chunks in place of the bundle runtime's (one process, so the agreement
    sees every call); the report gains "served": the per-step agreement with the bundle on `settings.backend`."""
    runtime = ServedRuntime(agents.shared_runtime(settings.backend, str(settings.bundle_dir), settings.threads),
                            url, checkpoint)
    agents.use_runtime(settings.backend, str(settings.bundle_dir), settings.threads, runtime)
    report = evaluate(settings, workers=1, out=out, progress=False)
    report["served"] = {"url": url, "checkpoint": str(checkpoint), "bundle_backend": settings.backend,
                        **runtime.agreement()}
    if out is not None:
        tmp = out / "served.json.tmp"
        tmp.write_text(json.dumps(report["served"], indent=1))
        tmp.replace(out / "served.json")
    return report
