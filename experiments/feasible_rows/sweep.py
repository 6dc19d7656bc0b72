"""Command shaping (omni_vla/core/shaping.py) in `omni-vla eval`'s closed loop, on validation seeds.

    python experiments/feasible_rows/sweep.py --fraction 0.9 --gripper-lead 0.018 --episodes 50 --workers 2 \
        [--seed-base 1100000] > out.jsonl

The shipped reference bundle (MNN), everything as shipped except `command_accel_fraction` (0: unshaped) and the
gripper's `command_max_lead` (0: none). One JSON line: success, shaping and clamps per episode by kind, jerk.
(The first version of this script, at f5f34c7, patched a prototype filter into the evaluation's agent instead.)
"""
from __future__ import annotations

import argparse
import json
import sys

from omni_vla_sim.eval import REPO, EvalSettings, evaluate
from omni_vla_sim.report import headline


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fraction", type=float, default=0.9, help="command_accel_fraction; 0: rows unshaped")
    p.add_argument("--gripper-lead", type=float, default=0.018, help="panda_finger_joint1's lead bound (m); 0: none")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed-base", type=int, default=1_100_000)
    args = p.parse_args()
    lead = (f"panda_finger_joint1={args.gripper_lead}",) if args.gripper_lead > 0 else ()
    settings = EvalSettings(backend="mnn", bundle_dir=REPO / "bundles" / "reference", episodes=args.episodes,
                            seed_base=args.seed_base, command_accel_fraction=args.fraction, command_max_lead=lead)
    report = evaluate(settings, workers=args.workers, progress=False)
    print(json.dumps({"fraction": args.fraction, "gripper_lead": args.gripper_lead, "seed_base": args.seed_base,
                      **headline(report)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
