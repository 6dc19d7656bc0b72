"""Crossfading a new chunk in ('naive' with splice_blend_ticks) against chunk-boundary clamps.

    python experiments/splice_blend/sweep.py --blend 0,3 --seed-bases 1100000,1200000 --episodes 50 > sweep.jsonl

The shipped reference bundle (MNN) in `omni-vla eval`'s closed loop with everything as shipped but
`splice_blend_ticks`; one JSON line per (blend, seed base): success, clamps and shaping per episode by kind, jerk.
Validation seeds (1,100,000 and 1,200,000 + k) first; the reported ones (1,000,000 + k) only to confirm a choice.
"""
from __future__ import annotations

import argparse
import json
import sys

from omni_vla_sim.eval import REPO, EvalSettings, evaluate
from omni_vla_sim.report import headline


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blend", default="0,3")
    p.add_argument("--seed-bases", default="1100000,1200000")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    for blend in (int(b) for b in args.blend.split(",")):
        for base in (int(b) for b in args.seed_bases.split(",")):
            settings = EvalSettings(backend="mnn", bundle_dir=REPO / "bundles" / "reference", episodes=args.episodes,
                                    seed_base=base, splice_blend_ticks=blend)
            report = evaluate(settings, workers=args.workers, progress=False)
            print(json.dumps({"splice_blend_ticks": blend, "seed_base": base, **headline(report)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
