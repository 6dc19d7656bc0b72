"""The checkpoint of record for run.py: a LeRobot policy trained briefly by LeRobot's own entry point on our
demonstrations, then imported.

    python benchmarks/lerobot_served/prepare.py WORK --policy act|smolvla [--episodes 50] [--steps N]

Steps whose output exists in WORK are not redone: WORK/demos (omni-vla collect, 64 px), WORK/lerobot_demos
(omni-vla dataset lerobot), for SmolVLA WORK/vlm (a test-size SmolVLM config and a word-level tokenizer of every
instruction's words: no hub here), WORK/<policy> (lerobot_train in LeRobot's venv, tests/support/lerobot_recipes.py),
WORK/<policy>_bundle (omni-vla import lerobot, MNN and ExecuTorch). Prints {step: seconds} and the checkpoint and
bundle paths as JSON.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"
sys.path.insert(0, str(SUPPORT))

from lerobot_env import PANDA_JOINTS  # noqa: E402
from lerobot_recipes import task_vlm, train  # noqa: E402


def run(cmd: list[str], log: Path) -> None:
    with open(log, "w") as sink:
        rc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO).returncode
    if rc != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... exited {rc}: see {log}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--policy", choices=("act", "smolvla"), required=True)
    ap.add_argument("--episodes", type=int, default=50, help="demonstrations per task")
    ap.add_argument("--steps", type=int, default=1500)
    args = ap.parse_args(argv)
    work, cli = args.work.resolve(), [sys.executable, "-m", "omni_vla.tools.cli"]
    work.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}

    def step(name: str, done: Path, cmd: list[str]) -> None:
        if done.exists():
            return
        t0 = time.monotonic()
        run(cmd, work / f"{name}.log")
        seconds[name] = round(time.monotonic() - t0, 1)

    step("collect", work / "demos", [*cli, "collect", "--episodes", str(args.episodes), "--workers", "2",
                                     "--image-size", "64", "--out", str(work / "demos")])
    step("dataset", work / "lerobot_demos", [*cli, "dataset", "lerobot", str(work / "demos"), "--out",
                                              str(work / "lerobot_demos")])
    trained = work / args.policy
    checkpoint = trained / "checkpoints" / "last" / "pretrained_model"
    vlm = work / "vlm" if args.policy == "smolvla" else None
    if vlm is not None and not vlm.is_dir():
        task_vlm(vlm)
    if not checkpoint.exists():
        t0 = time.monotonic()
        log = work / f"train_{args.policy}.log"
        try:
            train(args.policy, work / "lerobot_demos", trained, args.steps, vlm, log=log)
        except RuntimeError as exc:
            shutil.rmtree(trained, ignore_errors=True)  # a rerun trains afresh instead of meeting a half-written run
            sys.exit(f"{str(exc).splitlines()[0].rstrip(':')}: see {log}")
        seconds["train"] = round(time.monotonic() - t0, 1)
    bundle = work / f"{args.policy}_bundle"
    extra = (["--instructions", str(work / "lerobot_demos" / "meta" / "omni_vla_instructions.json")]
             if args.policy == "act" else [])
    step(f"import_{args.policy}", bundle, [*cli, "import", "lerobot", str(checkpoint), "--out", str(bundle),
                                           "--joint-names", ",".join(PANDA_JOINTS), "--rate-hz", "20", "--gripper",
                                           PANDA_JOINTS[-1], *extra])
    print(json.dumps({"seconds": seconds, "checkpoint": str(checkpoint), "bundle": str(bundle)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
