"""Supervisor trajectory smoothing against chunk-boundary clamps, on validation seeds.

    python experiments/supervisor_smoothing/sweep.py --smoothing 0.05,0.1,0.15 --episodes 25 --workers 2 \
        [--gripper-max-step 0.025] [--seed-base 1000000] > sweep.jsonl

The shipped reference bundle (MNN) in `omni-vla eval`'s closed loop, with config/safety_supervisor.yaml except
`trajectory_smoothing_s` (and, if given, the gripper's `max_relative_target`), written to a temporary copy. Seeds
from 1,100,000 (validation: the reported seeds 1,000,000 + k stay unseen by the choice; `--seed-base 1000000`
confirms a choice on them). One JSON line per setting: success, shaping and clamps per episode by
kind, jerk.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

from omni_vla_sim.eval import REPO, EvalSettings, evaluate
from omni_vla_sim.report import headline

VALIDATION_SEEDS = 1_100_000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoothing", default="0.05,0.1,0.15")
    p.add_argument("--episodes", type=int, default=25)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--gripper-max-step", type=float, default=None, help="the last joint's max_relative_target (m)")
    p.add_argument("--seed-base", type=int, default=VALIDATION_SEEDS)
    args = p.parse_args()
    base = yaml.safe_load((REPO / "config" / "safety_supervisor.yaml").read_text())
    for value in (float(v) for v in args.smoothing.split(",")):
        cfg = {k: dict(v) for k, v in base.items()}
        params = {**base["safety_supervisor"]["ros__parameters"], "trajectory_smoothing_s": value}
        if args.gripper_max_step is not None:
            params["max_relative_target"] = [*params["max_relative_target"][:-1], args.gripper_max_step]
        cfg["safety_supervisor"]["ros__parameters"] = params
        path = Path(tempfile.mkdtemp()) / "safety_supervisor.yaml"
        path.write_text(yaml.safe_dump(cfg))
        settings = EvalSettings(backend="mnn", bundle_dir=REPO / "bundles" / "reference", episodes=args.episodes,
                                seed_base=args.seed_base, supervisor_config=path)
        report = evaluate(settings, workers=args.workers, progress=False)
        print(json.dumps({"trajectory_smoothing_s": value, "gripper_max_step": params["max_relative_target"][-1],
                          "seed_base": args.seed_base, **headline(report)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
