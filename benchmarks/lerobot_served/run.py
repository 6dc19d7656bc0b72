"""Does our loop degrade a user's policy: the same LeRobot checkpoint served by LeRobot's own code and imported into
a bundle, evaluated by the same suite on the same seeds.

    python benchmarks/lerobot_served/run.py --checkpoint CKPT/pretrained_model --bundle BUNDLE [--checkpoint ...
        --bundle ...] [--backends mnn,executorch] [--episodes 10] [--tasks ...] [--no-reference] --out OUT.json

For each checkpoint and backend: one evaluation in which LeRobot's server (tests/support/lerobot_server.py in
LeRobot's own venv, OpenPI protocol on loopback) computes every chunk while the bundle computes the same chunk from
the same inputs (the per-step agreement, omni_vla_sim.served), and one in which the bundle alone drives. The shipped
reference policy runs the same seeds for scale. Prints a summary and writes the JSON (its plot:
benchmarks/plots/make_plots.py --only lerobot_served/served.json).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))

from lerobot_env import lerobot_python, pi0_python, served_policy  # noqa: E402
from omni_vla_sim.eval import EvalSettings, evaluate  # noqa: E402
from omni_vla_sim.served import evaluate_served  # noqa: E402

PYTHONS = {"act": lerobot_python, "smolvla": lerobot_python, "pi0": pi0_python, "pi05": pi0_python}


def run_summary(name: str, report: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "successes": report["overall"]["successes"], "episodes": report["overall"]["episodes"],
            "per_task": {t: [g["successes"], g["episodes"]] for t, g in report["tasks"].items()},
            "clamps_per_episode": report["overall"]["clamps_per_episode"],
            "mean_episode_length": report["overall"]["mean_episode_length"]}


def same_episodes(served: Path, imported: Path, tol: float = 1e-4) -> dict[str, Any]:
    """Episode by episode (same seeds): how many ended alike (success and length), the largest difference of any
    action the loop sent, and where the two runs' actions first parted by more than `tol` (closed loop, a
    difference far below the policy's own can still grow through contact)."""
    a, b = (json.loads((d / "episodes.json").read_text()) for d in (served, imported))
    alike = sum((x["seed"], x["success"], x["steps"]) == (y["seed"], y["success"], y["steps"]) for x, y in zip(a, b))
    diffs, parted = [], []
    for x, y in zip(a, b):
        n = min(len(x["actions"] or ()), len(y["actions"] or ()))
        if n == 0:
            continue
        d = np.max(np.abs(np.array(x["actions"][:n]) - np.array(y["actions"][:n])), axis=1)
        diffs.append(float(d.max(initial=0.0)))
        if (d > tol).any():
            parted.append({"task": x["task"], "seed": x["seed"], "step": int(np.argmax(d > tol)), "of": n,
                           "success": [x["success"], y["success"]]})
    return {"episodes_alike": alike, "episodes": len(a), "max_action_diff": max(diffs, default=None),
            "parted": parted}


def served_vs_imported(checkpoint: Path, bundle: Path, backends: list[str], common: dict[str, Any]) -> dict[str, Any]:
    """One policy: per backend, LeRobot's chunks driving with the bundle alongside, then the bundle alone."""
    kind = json.loads((checkpoint / "config.json").read_text()).get("type")
    runs, agreement = [], {}
    with served_policy(checkpoint, PYTHONS[kind]()) as url, tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            settings = EvalSettings(backend=backend, bundle_dir=bundle, **common)
            served_dir, imported_dir = Path(tmp) / f"{backend}_served", Path(tmp) / f"{backend}_imported"
            served = evaluate_served(settings, url, checkpoint, out=served_dir)
            imported = evaluate(settings, workers=1, progress=False, out=imported_dir)
            agreement[backend] = {**served["served"], **same_episodes(served_dir, imported_dir)}
            runs.append(run_summary(f"{kind} served by LeRobot (bundle on {backend} alongside)", served))
            runs.append(run_summary(f"{kind} imported, {backend}", imported))
            print(json.dumps({"policy": kind, "backend": backend, **agreement[backend]}), file=sys.stderr)
    return {"policy": kind, "checkpoint": str(checkpoint), "bundle": str(bundle), "agreement": agreement, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, action="append", required=True,
                    help="LeRobot pretrained_model directory (repeat, one per --bundle)")
    ap.add_argument("--bundle", type=Path, action="append", required=True,
                    help="the bundle `omni-vla import lerobot` made of it")
    ap.add_argument("--backends", default="mnn,executorch")
    ap.add_argument("--episodes", type=int, default=10, help="per task")
    ap.add_argument("--tasks", nargs="+", default=None)
    ap.add_argument("--image-size", type=int, default=64, help="the simulator's camera size (the dataset's)")
    ap.add_argument("--no-reference", action="store_true", help="leave out the shipped reference policy")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if len(args.checkpoint) != len(args.bundle):
        print(f"{len(args.checkpoint)} --checkpoint for {len(args.bundle)} --bundle; expected one bundle per "
              "checkpoint", file=sys.stderr)
        return 2
    for checkpoint, bundle in zip(args.checkpoint, args.bundle):
        if not (checkpoint / "config.json").is_file() or not (bundle / "manifest.json").is_file():
            print(f"{checkpoint} / {bundle}: expected a LeRobot pretrained_model directory (config.json) and the "
                  "bundle imported from it (manifest.json)", file=sys.stderr)
            return 2
        kind = json.loads((checkpoint / "config.json").read_text()).get("type")
        if kind not in PYTHONS:
            print(f"{checkpoint}: policy type {kind!r}; expected one of {', '.join(PYTHONS)}", file=sys.stderr)
            return 2
    common: dict[str, Any] = {"episodes": args.episodes, "image_size": args.image_size, "strategy": "naive",
                              "execution_horizon": 0, **({"tasks": tuple(args.tasks)} if args.tasks else {})}
    t0 = time.monotonic()
    policies = [served_vs_imported(c, b, args.backends.split(","), common)
                for c, b in zip(args.checkpoint, args.bundle)]
    reference = None
    if not args.no_reference:
        ref = EvalSettings(backend="mnn", bundle_dir=REPO / "bundles" / "reference",
                           **{**common, "image_size": EvalSettings.model_fields["image_size"].default,
                              "execution_horizon": EvalSettings.model_fields["execution_horizon"].default})
        reference = run_summary("reference policy (bundles/reference, mnn)", evaluate(ref, workers=1, progress=False))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    out = {"what": "LeRobot policies served by LeRobot's own code vs imported, same seeds (benchmarks/lerobot_served)",
           "policies": policies, "reference": reference,
           "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in common.items()},
           "wall_s": round(time.monotonic() - t0, 1), "commit": commit.stdout.strip()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1) + "\n")
    tmp.replace(args.out)
    print(json.dumps([{"policy": p["policy"], "agreement": p["agreement"],
                       "runs": [(r["name"], r["successes"], r["episodes"]) for r in p["runs"]]} for p in policies]
                     + [reference and (reference["name"], reference["successes"], reference["episodes"])], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
