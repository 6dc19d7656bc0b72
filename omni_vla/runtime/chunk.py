"""Runtime of a kind-"chunk" bundle (format 3): raw observations in, raw action chunk out, on MNN or ExecuTorch.

The bundle's normalisation is applied here, in numpy, into buffers allocated once: the graph is the network
alone, so an imported policy needs none of its training code on the robot. The backend's program loader
(`load_chunk_program` of runtime/mnn.py or runtime/executorch.py) is passed in, so the MNN path imports no torch;
inference/client.py `open_chunk_runtime` picks it by name.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from omni_vla.backends import LIBRARY_OF
from omni_vla.runtime.base import check_array
from omni_vla.runtime.bundle import ( MANIFEST_NAME, BundleError, check_version, read_json_model,
                                     verify_artifact)
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT, CHUNK_STAGE, ChunkManifest, ChunkStageSpec

# The loaded program: run() on the runtime's own input buffers (refilled in place) -> output [1, H, D], a view
# the next call overwrites.
Program = Callable[[], np.ndarray]
# (artifact path, stage spec, the runtime's input buffers, threads) -> Program
LoadProgram = Callable[[Path, ChunkStageSpec, Sequence[np.ndarray], int], Program]


def read_chunk_manifest(bundle_dir: str | Path) -> ChunkManifest:
    return read_json_model(Path(bundle_dir) / MANIFEST_NAME, ChunkManifest, CHUNK_FORMAT)


class ChunkRuntime:
    """One kind-"chunk" bundle on one backend: `infer(images, state, out)` writes the raw chunk into `out`."""

    def __init__(self, bundle_dir: str | Path, backend: str, load_program: LoadProgram, num_threads: int = 1,
                 check_versions: bool = True, warmup: bool = True, manifest: ChunkManifest | None = None) -> None:
        """`manifest`: the bundle's, when the caller has read it (runtime/registry.py read_any_manifest)."""
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.bundle_dir = Path(bundle_dir)
        self.manifest = m = read_chunk_manifest(self.bundle_dir) if manifest is None else manifest
        stage = m.stages[CHUNK_STAGE]
        spec = stage.artifacts.get(backend)  # type: ignore[call-overload]
        if spec is None:
            raise BundleError(f"{self.bundle_dir}: no {backend} artifact; the bundle has {sorted(stage.artifacts)}")
        check_version(m.versions, LIBRARY_OF[backend], strict=check_versions)  # type: ignore[index]
        path = verify_artifact(self.bundle_dir, spec)
        self.backend, self.num_threads = backend, num_threads
        self.cameras = [c.name for c in m.cameras]
        self.joint_names = list(m.action.joint_names)
        self.chunk_length, self.action_dim = m.action.chunk_length, len(m.action.joint_names)
        self.control_rate_hz = m.control_rate_hz
        self._in = [np.zeros(t.shape, np.float32) for t in stage.inputs]
        self._shapes = {t.name: t.shape for t in stage.inputs}

        def affine(key: str, lead: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
            a = m.normalization[key]
            return (np.asarray(a.subtract, np.float32).reshape(lead), np.asarray(a.divide, np.float32).reshape(lead))

        self._norm = [affine(c, (-1, 1, 1)) for c in self.cameras] + [affine("state", (-1,))]
        self._act_sub, self._act_div = affine("action", (-1,))
        cond = m.instruction_input
        self.condition_dim = len(cond.names) if cond else 0
        self._table = {} if cond is None else {t: np.asarray(v, np.float32) for t, v in cond.table.items()}
        if cond is not None:
            self._norm.append(affine(cond.input, (-1,)))
        self._run = load_program(path, stage, self._in, num_threads)
        if warmup:
            self._run()

    def condition_for(self, text: str) -> np.ndarray:
        """The raw conditioning vector [n] of an instruction (policies with an instruction_input); unknown text is
        refused, never guessed. Without an instruction_input the policy ignores language: an empty vector."""
        if not self._table:
            return np.zeros(0, np.float32)
        if text not in self._table:
            raise KeyError(f"instruction {text!r} is not in the bundle's table; expected one of {sorted(self._table)}")
        return self._table[text].copy()

    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, out: np.ndarray,
              condition: np.ndarray | None = None) -> None:
        """images: camera name -> float32 [1, 3, H, W] in [0, 1]; state float32 [1, S] raw; condition float32 [1, n]
        raw (from condition_for; required iff the bundle has an instruction_input); out float32 [H, D] raw."""
        for name in self.cameras:
            if name not in images:
                raise ValueError(f"no image for camera {name!r}; the bundle expects {self.cameras}")
            check_array(name, images[name], self._shapes[name])
        check_array("state", state, self._shapes["state"])
        check_array("out", out, (self.chunk_length, self.action_dim))
        sources = [*(images[c] for c in self.cameras), state]
        if self.condition_dim:
            if condition is None:
                raise ValueError("no condition given: this policy is conditioned on the instruction (condition_for)")
            check_array("condition", condition, (1, self.condition_dim))
            sources.append(condition)
        for buf, x, (sub, div) in zip(self._in, sources, self._norm):
            np.subtract(x, sub, out=buf)
            np.divide(buf, div, out=buf)
        y = self._run().reshape(out.shape)
        np.multiply(y, self._act_div, out=out)
        np.add(out, self._act_sub, out=out)

    def close(self) -> None:
        self._run = None  # type: ignore[assignment]
