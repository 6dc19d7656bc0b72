"""`omni-vla parity --bundle <chunk bundle>`: a format-3 bundle (an imported ACT) on each of its backends against
eager PyTorch of the same network, on recorded or synthetic observations.

The eager reference is the importer's ActInference rebuilt from the checkpoint the manifest names
(`source.checkpoint`, or --checkpoint when the bundle travelled without it), refused unless that checkpoint's
weights hash to the manifest's `source.weights_sha256`: the bundle keeps no second copy of the weights, and a
reference built from other weights would measure nothing. Every backend gets the same raw inputs and the
bundle's own normalisation (ChunkRuntime for ExecuTorch and MNN, the same numpy arithmetic around eager PyTorch
and around onnxruntime on the kept policy.onnx), so the SNR measures the conversion alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.inference.client import open_chunk_runtime
from omni_vla.runtime.bundle import sha256_file
from omni_vla.runtime.chunk import ChunkRuntime, read_chunk_manifest
from omni_vla.runtime.chunk_manifest import CHUNK_STAGE, ChunkManifest
from omni_vla_policies.act_model import ActInference
from omni_vla_policies.lerobot_checkpoint import CheckpointError, read_act_checkpoint
from omni_vla_policies.snr import snr_db

RECORDED_CAMERAS = ("front", "wrist")  # what the HDF5 demos record (obs/<name>_rgb), at one size

# One observation: camera name -> float32 [1, 3, H, W] in [0, 1]; raw state [1, S]; instruction text or None.
Observation = tuple[dict[str, np.ndarray], np.ndarray, str | None]
# raw inputs (images, state, raw condition [1, n] or None) -> raw chunk [H, D]
Runner = Callable[[dict[str, np.ndarray], np.ndarray, np.ndarray | None], np.ndarray]


def _recorded(m: ChunkManifest, steps: list[tuple[dict[str, np.ndarray], str]], source: str) -> list[Observation]:
    """Recorded steps (parity.py sample_steps) as observations, for a bundle whose cameras the demos record
    (front and wrist, at their size) and whose state is the recorded joint vector."""
    step = steps[0][0]
    recorded = {c: tuple(step[c].shape[:2]) for c in RECORDED_CAMERAS}
    wanted = {c.name: (c.height, c.width) for c in m.cameras}
    if any(recorded.get(name) != hw for name, hw in wanted.items()) or len(step["qpos"]) != len(m.state.joint_names):
        raise ValueError(
            f"{source} records cameras {recorded} and a {len(step['qpos'])}-value state; the bundle wants cameras "
            f"{wanted} and {len(m.state.joint_names)} state values (expected demos with the bundle's cameras, or "
            "no --dataset for synthetic observations)")
    return [({c: np.ascontiguousarray(s[c].transpose(2, 0, 1)[None], np.float32) / np.float32(255.0) for c in wanted},
             s["qpos"][None].astype(np.float32), text) for s, text in steps]


def _synthetic(m: ChunkManifest, n: int, seed: int) -> list[Observation]:
    """Uniform images; states spread like the training data (the state normalisation's own scale)."""
    rng = np.random.default_rng(seed)
    a = m.normalization["state"]
    sub, div = np.asarray(a.subtract, np.float32), np.asarray(a.divide, np.float32)
    texts = sorted(m.instruction_input.table) if m.instruction_input else [None]
    d = len(m.state.joint_names)
    return [({c.name: rng.random((1, 3, c.height, c.width), dtype=np.float32) for c in m.cameras},
             (sub + div * rng.standard_normal(d, dtype=np.float32))[None].astype(np.float32), texts[k % len(texts)])
            for k in range(n)]


def eager_reference(m: ChunkManifest, checkpoint: Path | None) -> ActInference:
    """ActInference from the checkpoint the bundle was imported from, verified by its weights' hash."""
    where = Path(checkpoint if checkpoint is not None else m.source.get("checkpoint", ""))
    hint = "pass --checkpoint DIR, the LeRobot pretrained_model directory the bundle was imported from"
    try:
        ck = read_act_checkpoint(where)
    except CheckpointError as exc:
        raise CheckpointError(f"no eager reference: {exc}; {hint}") from exc
    want, got = m.source.get("weights_sha256"), sha256_file(where / "model.safetensors")
    if got != want:
        raise CheckpointError(f"{where / 'model.safetensors'}: sha256 {got[:16]}..., the bundle was imported from "
                              f"weights {str(want)[:16]}...; {hint}")
    return ActInference(ck.weights, ck.shape).eval()


def _graph_inputs(m: ChunkManifest) -> Callable[[dict, np.ndarray, np.ndarray | None], list[np.ndarray]]:
    """Raw inputs -> the graph's normalised inputs, in the stage's order (ChunkRuntime's arithmetic)."""
    def affine(key: str, lead: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        a = m.normalization[key]
        return np.asarray(a.subtract, np.float32).reshape(lead), np.asarray(a.divide, np.float32).reshape(lead)

    cams = [(c.name, affine(c.name, (-1, 1, 1))) for c in m.cameras]
    state = affine("state", (-1,))
    cond = affine(m.instruction_input.input, (-1,)) if m.instruction_input else None

    def run(images: dict, raw_state: np.ndarray, condition: np.ndarray | None) -> list[np.ndarray]:
        out = [((images[name] - sub) / div).astype(np.float32) for name, (sub, div) in cams]
        out.append(((raw_state - state[0]) / state[1]).astype(np.float32))
        if cond is not None:
            out.append(((condition - cond[0]) / cond[1]).astype(np.float32))
        return out

    return run


def _runners(bundle: Path, m: ChunkManifest, threads: int,
             checkpoint: Path | None) -> tuple[dict[str, Runner], dict[str, str], list[ChunkRuntime]]:
    """name -> runner ("torch" first: the reference), name -> why it was skipped, and what to close."""
    shape = (m.action.chunk_length, len(m.action.joint_names))
    act = m.normalization["action"]
    act_sub, act_div = np.asarray(act.subtract, np.float32), np.asarray(act.divide, np.float32)
    graph_inputs = _graph_inputs(m)
    torch.set_num_threads(threads)
    model = eager_reference(m, checkpoint)

    def run_torch(images: dict, state: np.ndarray, condition: np.ndarray | None) -> np.ndarray:
        with torch.no_grad():
            y = model(*(torch.from_numpy(x) for x in graph_inputs(images, state, condition)))
        return y.numpy().reshape(shape) * act_div + act_sub

    runners: dict[str, Runner] = {"torch": run_torch}
    skipped: dict[str, str] = {}
    opened = []
    artifacts = m.stages[CHUNK_STAGE].artifacts
    for name in ROBOT_BACKENDS:
        if name not in artifacts:
            skipped[name] = f"the bundle has no {name} artifact"
            continue
        rt = open_chunk_runtime(name, bundle, threads)
        opened.append(rt)

        def run_rt(images: dict, state: np.ndarray, condition: np.ndarray | None, rt: ChunkRuntime = rt) -> np.ndarray:
            out = np.zeros(shape, np.float32)
            rt.infer(images, state, out, condition)
            return out

        runners[name] = run_rt
    if "onnx" not in artifacts:
        skipped["onnxruntime"] = "the bundle has no onnx artifact (imported before it kept one)"
    else:
        import onnxruntime as ort  # optional: export extra, parity and benchmarks only

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(str(bundle / artifacts["onnx"].file), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]

        def run_ort(images: dict, state: np.ndarray, condition: np.ndarray | None) -> np.ndarray:
            y = sess.run(None, dict(zip(names, graph_inputs(images, state, condition))))[0]
            return y.reshape(shape) * act_div + act_sub

        runners["onnxruntime"] = run_ort
    return runners, skipped, opened


def run_chunk_parity(bundle_dir: str | Path, steps: list[tuple[dict[str, np.ndarray], str]] | None = None,
                     n: int = 100, seed: int = 0, threads: int = 1, checkpoint: Path | None = None,
                     source: str = "synthetic") -> dict:
    """SNR (dB) and max-abs error of each backend's raw chunks against eager PyTorch, over n observations.
    `snr_db` is on the raw actions; `snr_db_delta` on actions minus the joint state for an absolute action space
    (the part the network produces: the harder number), on the actions themselves for a delta space. `steps`:
    recorded steps from parity.py sample_steps (`source` names them); None: n synthetic observations."""
    bundle = Path(bundle_dir)
    m = read_chunk_manifest(bundle)
    obs = _recorded(m, steps, source) if steps is not None else _synthetic(m, n, seed)
    runners, skipped, opened = _runners(bundle, m, threads, checkpoint)
    table = m.instruction_input.table if m.instruction_input else {}
    fallbacks = 0
    chunks: dict[str, list[np.ndarray]] = {k: [] for k in runners}
    states = []
    for images, state, text in obs:
        condition = None
        if table:
            if text not in table:  # parity is about numerics: an instruction outside the table takes a known one
                fallbacks += 1
                text = sorted(table)[0]
            condition = np.asarray(table[text], np.float32)[None]
        for name, run in runners.items():
            chunks[name].append(run(images, state, condition))
        states.append(state)
    for rt in opened:
        rt.close()
    ref = np.stack(chunks.pop("torch"))
    base = np.stack(states) if m.action.space == "absolute" else np.zeros_like(np.stack(states))
    report: dict = {"kind": "chunk", "policy": m.policy, "observations": len(obs),
                    "source": source, "threads": threads,
                    "seed": seed, "reference": "torch eager (ActInference from the source checkpoint)",
                    "instruction_fallbacks": fallbacks, "skipped": skipped}
    for name, got in chunks.items():
        g = np.stack(got)
        report[name] = {"snr_db": round(snr_db(ref, g), 2), "max_abs": float(np.max(np.abs(g - ref))),
                        "snr_db_delta": round(snr_db(ref - base, g - base), 2)}
    return report
