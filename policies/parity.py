"""PyTorch eager vs ExecuTorch vs MNN on recorded observations with fixed noise (end to end and per stage).

    python -m omni_vla_policies.parity --bundle bundles/reference --dataset data/demos --n 100 --json
    python -m omni_vla_policies.parity --bundle bundles/act --dataset data/demos --n 100 --json

A staged VLA bundle (an imported SmolVLA, pi0, pi0.5) is measured by vla/parity_checkpoint.py against the eager
fp32 model rebuilt from its checkpoint. A chunk bundle (format 3, an imported ACT) is measured by parity_chunk.py, against eager PyTorch rebuilt from the
checkpoint it was imported from (--checkpoint when it has moved), with onnxruntime on its policy.onnx as a third
backend; the flow bundle (format 2) here.

Observations come from the dataset (images, qpos, instruction; the recorded next actions serve as the
committed prefix, prefix_len cycling 0..max_prefix); without --dataset, synthetic observations
(said so in the JSON). SNR = 10 log10(sum ref^2 / sum err^2) over all observations; `snr_db` is on the
raw actions (the contract), `snr_db_delta` on actions minus the current joint positions, which is the
part the network actually produces and the harder number.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import h5py
import numpy as np

from omni_vla.backends import EAGER, LOOP_BACKENDS, ROBOT_BACKENDS
from omni_vla.runtime.bundle import read_manifest
from omni_vla.runtime.chunk_loop import is_chunk_bundle
from omni_vla.runtime.registry import flow_runtime, sniff_kind
from omni_vla.runtime.text import InstructionError, load_table
from omni_vla.tools.errors import existing_bundle, existing_dir, positive_int
from omni_vla_policies.dataset import FORMAT, _episode_files
from omni_vla_policies.parity_chunk import run_chunk_parity
from omni_vla_policies.snr import snr_db
from omni_vla_policies.stdio import stdout_to_stderr
from omni_vla_policies.vla.parity_checkpoint import run_vla_parity


def observations(bundle_dir: Path, dataset: Path | None, n: int, seed: int) -> tuple[list[dict], str]:
    """n observation dicts (float32 policy inputs + instruction text + prefix), evenly over the dataset."""
    man = read_manifest(bundle_dir)
    h, d, s = man.horizon, man.action_dim, man.image_size
    rng = np.random.default_rng(seed)
    obs = []
    if dataset is not None:
        for k, (step, instruction) in enumerate(sample_steps(dataset, n, h)):
            obs.append({
                "front": np.ascontiguousarray(step["front"].transpose(2, 0, 1)[None], np.float32) / np.float32(255.0),
                "wrist": np.ascontiguousarray(step["wrist"].transpose(2, 0, 1)[None], np.float32) / np.float32(255.0),
                "state": step["qpos"][None].astype(np.float32), "text": instruction,
                "prefix": step["actions"][None].astype(np.float32), "prefix_len": k % (man.max_prefix + 1),
                "noise": rng.standard_normal((1, h, d), dtype=np.float32),
            })
        return obs, f"dataset:{dataset}"
    mean, std = np.array(man.normalization.state_mean, np.float32), np.array(man.normalization.state_std, np.float32)
    texts = sorted(load_table(bundle_dir / man.instruction.table.file))
    for k in range(n):
        state = (mean + std * rng.standard_normal(d).astype(np.float32))[None]
        obs.append({
            "front": rng.random((1, 3, s, s), dtype=np.float32), "wrist": rng.random((1, 3, s, s), dtype=np.float32),
            "state": state, "text": texts[k % len(texts)],
            "prefix": (state[:, None, :] + 0.01 * rng.standard_normal((1, h, d))).astype(np.float32),
            "prefix_len": k % (man.max_prefix + 1), "noise": rng.standard_normal((1, h, d), dtype=np.float32),
        })
    return obs, "synthetic"


def sample_steps(dataset: Path, n: int, horizon: int) -> list[tuple[dict[str, np.ndarray], str]]:
    """n steps spread evenly over all demos, read by h5py slicing (not the whole dataset)."""
    index = []
    for path in _episode_files(Path(dataset)):
        with h5py.File(path, "r") as f:
            if f["data"].attrs.get("format") != FORMAT:
                raise ValueError(f"{path}: dataset format {f['data'].attrs.get('format')!r}, expected {FORMAT!r}")
            for key in f["data"]:
                index.extend((path, key, t) for t in range(len(f["data"][key]["actions"])))
    out = []
    for i in np.linspace(0, len(index) - 1, n).astype(int):
        path, key, t = index[i]
        with h5py.File(path, "r") as f:
            g = f["data"][key]
            t_len = len(g["actions"])
            acts = g["actions"][t:min(t + horizon, t_len)]
            acts = np.concatenate([acts, np.repeat(acts[-1:], horizon - len(acts), 0)])
            out.append(({"front": g["obs/front_rgb"][t], "wrist": g["obs/wrist_rgb"][t], "qpos": g["obs/qpos"][t],
                         "actions": acts}, str(g.attrs["instruction"])))
    return out


def _stats(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    return {"snr_db": round(snr_db(ref, got), 2), "max_abs": float(np.max(np.abs(got - ref)))}


def run_parity(bundle_dir: Path, dataset: Path | None = None, n: int = 100, seed: int = 0, threads: int = 1,
               checkpoint: Path | None = None) -> dict:
    """Any kind: a chunk bundle by parity_chunk.py, a staged VLA by vla/parity_checkpoint.py (`checkpoint`: the
    weights of their eager reference, when moved), the reference flow policy here."""
    if sniff_kind(bundle_dir) == "vla":
        if dataset is not None:
            raise ValueError(f"--dataset {dataset}: a staged VLA bundle is compared on one seeded observation (its "
                             "cameras and state are its own); expected no --dataset")
        return run_vla_parity(bundle_dir, seed, checkpoint)
    if is_chunk_bundle(bundle_dir):
        steps = sample_steps(dataset, n, 1) if dataset is not None else None
        source = f"dataset:{dataset}" if dataset is not None else "synthetic"
        return run_chunk_parity(bundle_dir, steps, n, seed, threads, checkpoint, source)
    if checkpoint is not None:
        raise ValueError(f"--checkpoint {checkpoint}: only a chunk bundle (format 3) is rebuilt from a checkpoint; "
                         f"{bundle_dir} carries its own eager reference")
    return run_flow_parity(bundle_dir, dataset, n, seed, threads)


def run_flow_parity(bundle_dir: Path, dataset: Path | None = None, n: int = 100, seed: int = 0, threads: int = 1) -> dict:
    obs, source = observations(bundle_dir, dataset, n, seed)
    man = read_manifest(bundle_dir)
    rts = {b: flow_runtime(b)(bundle_dir, threads) for b in LOOP_BACKENDS}
    h, d = rts[EAGER].horizon, rts[EAGER].action_dim
    res: dict[str, dict[str, list[np.ndarray]]] = {k: {"actions": [], "context": [], "flow": [], "delta": []} for k in rts}
    pin_err = 0.0
    fallbacks = 0
    known = rts[EAGER]._text.known_instructions
    for o in obs:
        try:
            instr = rts[EAGER].encode_instruction(o["text"])[None]
        except InstructionError:  # parity is about numerics: an unknown phrasing takes a known embedding
            fallbacks += 1
            instr = rts[EAGER].encode_instruction(known[0])[None]
        ctx_ref = rts[EAGER].context(o["front"], o["wrist"], o["state"], instr)
        for name, rt in rts.items():
            out = np.zeros((h, d), np.float32)
            rt.infer({"front": o["front"], "wrist": o["wrist"]}, o["state"], instr, o["prefix"], o["prefix_len"], o["noise"], out)
            ctx, flow = rt.run_stages(o["front"], o["wrist"], o["state"], instr, ctx_ref, o["noise"], o["prefix"], o["prefix_len"])
            res[name]["actions"].append(out.copy())
            res[name]["delta"].append(out - o["state"])
            res[name]["context"].append(ctx)
            res[name]["flow"].append(flow)
            pl = o["prefix_len"]
            if pl:
                pin_err = max(pin_err, float(np.max(np.abs(out[:pl] - o["prefix"][0, :pl]))))
    ref = {k: np.stack(v) for k, v in res[EAGER].items()}
    report: dict = {"observations": len(obs), "source": source, "threads": threads, "seed": seed,
                    "prefix_pin_max_abs": pin_err, "instruction_fallbacks": fallbacks}
    for name in ROBOT_BACKENDS:
        got = {k: np.stack(v) for k, v in res[name].items()}
        report[name] = {"compute_dtype": man.compute_dtype(name), **_stats(ref["actions"], got["actions"]),
                        "snr_db_delta": round(snr_db(ref["delta"], got["delta"]), 2),
                        "stages": {"prefix": _stats(ref["context"], got["context"]), "flow": _stats(ref["flow"], got["flow"])}}
    for rt in rts.values():
        rt.close()
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla parity", description="PyTorch vs ExecuTorch vs MNN (and onnxruntime for a chunk bundle) on recorded observations.")
    p.add_argument("--bundle", type=existing_bundle, required=True)
    p.add_argument("--dataset", type=existing_dir, default=None, help="recorded demos (default: synthetic observations)")
    p.add_argument("--n", type=positive_int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--checkpoint", type=existing_dir, default=None,
                   help="imported bundles: the LeRobot checkpoint it was imported from, if no longer where the manifest says")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    with stdout_to_stderr() as real:
        report = run_parity(a.bundle, a.dataset, a.n, a.seed, a.threads, a.checkpoint)
        text = json.dumps(report) if a.json else json.dumps(report, indent=2)
        print(text, file=real)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
