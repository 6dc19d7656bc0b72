"""Parity of a shipped flow bundle on another CPU: reference outputs recorded where torch runs, checked where it does not.

    python benchmarks/aarch64/parity.py record --bundle bundles/reference --out ref.npz [--n 20]   # x86, with torch
    python benchmarks/aarch64/parity.py check --bundle bundles/reference --ref ref.npz            # aarch64 robot path

`record` runs the bundle's eager PyTorch program and every robot runtime on n seeded synthetic observations (the
inputs of `omni-vla parity`) and saves inputs and outputs. `check` runs every robot runtime this machine has on the
same inputs and prints JSON: each runtime's SNR (dB) against eager PyTorch and against the same runtime on the
recording machine (what the other CPU's kernels change), and the machine it ran on.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

from omni_vla.backends import EAGER, ROBOT_BACKENDS
from omni_vla.runtime.registry import BackendUnavailable, flow_runtime

INPUTS = ("front", "wrist", "state", "instruction", "prefix", "prefix_len", "noise")


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    err = float(np.sum((got.astype(np.float64) - ref.astype(np.float64)) ** 2))
    return float("inf") if err == 0 else 10.0 * float(np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err))


def run(rt, obs: dict[str, np.ndarray]) -> np.ndarray:  # noqa: ANN001 - any PolicyRuntime
    n = obs["front"].shape[0]
    out = np.zeros((n, rt.horizon, rt.action_dim), np.float32)
    for k in range(n):
        rt.infer({"front": obs["front"][k], "wrist": obs["wrist"][k]}, obs["state"][k], obs["instruction"][k],
                 obs["prefix"][k], int(obs["prefix_len"][k]), obs["noise"][k], out[k])
    return out


def record(bundle: Path, out: Path, n: int, seed: int) -> dict:
    from omni_vla_policies.parity import observations  # optional: the recording machine has the training side

    eager = flow_runtime(EAGER)(bundle, 1)
    obs_list, _ = observations(bundle, None, n, seed)
    obs = {k: np.stack([np.asarray(o[k]) for o in obs_list]) for k in ("front", "wrist", "state", "prefix", "noise")}
    obs["prefix_len"] = np.array([o["prefix_len"] for o in obs_list], np.int64)
    obs["instruction"] = np.stack([eager.encode_instruction(o["text"])[None] for o in obs_list])
    saved = {**obs, "eager": run(eager, obs)}
    eager.close()
    for backend in ROBOT_BACKENDS:
        rt = flow_runtime(backend)(bundle, 1)
        saved[backend] = run(rt, obs)
        rt.close()
    np.savez(out, **saved)
    return {"recorded": str(out), "observations": n, "backends": list(ROBOT_BACKENDS), "machine": platform.machine()}


def check(bundle: Path, ref: Path) -> dict:
    saved = dict(np.load(ref))
    obs = {k: saved[k] for k in INPUTS}
    report: dict = {"machine": platform.machine(), "python": platform.python_version(), "observations": len(obs["front"])}
    for backend in ROBOT_BACKENDS:
        try:
            rt = flow_runtime(backend)(bundle, 1)
        except (ImportError, BackendUnavailable) as exc:  # a runtime without a wheel for this CPU
            report[backend] = {"skipped": f"{type(exc).__name__}: {exc}"}
            continue
        got = run(rt, obs)
        rt.close()
        same = float(np.max(np.abs(got - saved[backend])))
        report[backend] = {"snr_db_vs_eager_x86": round(snr_db(saved["eager"], got), 2),
                           "snr_db_vs_same_runtime_x86": round(snr_db(saved[backend], got), 2) if same else None,
                           "max_abs_vs_same_runtime_x86": same, "bitwise_equal_to_x86": same == 0.0}
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--bundle", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--n", type=int, default=20)
    r.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("check")
    c.add_argument("--bundle", type=Path, required=True)
    c.add_argument("--ref", type=Path, required=True)
    a = p.parse_args(argv)
    report = record(a.bundle, a.out, a.n, a.seed) if a.cmd == "record" else check(a.bundle, a.ref)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
