"""The checkpoint of record for run.py: a LeRobot policy trained briefly by LeRobot's own entry point on our
demonstrations, then imported.

    python benchmarks/lerobot_served/prepare.py WORK --policy act|smolvla [--episodes 50] [--steps N]

Steps whose output exists in WORK are not redone: WORK/demos (omni-vla collect, 64 px), WORK/lerobot_demos
(omni-vla dataset lerobot), for SmolVLA WORK/vlm (a test-size SmolVLM config and a word-level tokenizer of every
instruction's words: no hub here), WORK/<policy> (lerobot_train in LeRobot's venv), WORK/<policy>_bundle (omni-vla import
lerobot, MNN and ExecuTorch). Prints {step: seconds} and the checkpoint and bundle paths as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUPPORT = REPO / "tests" / "support"
sys.path.insert(0, str(SUPPORT))

from lerobot_env import PANDA_JOINTS, lerobot_python, smolvla_python, write_smolvla_vlm  # noqa: E402
from omni_vla_sim.tasks import TASKS  # noqa: E402

COMMON = ["--dataset.repo_id=local/omni_vla", "--policy.device=cpu", "--policy.push_to_hub=false",
          "--wandb.enable=false", "--batch_size=32", "--num_workers=1", "--seed=0"]
# docs/lerobot.md's recipe.
ACT = ["--policy.type=act", "--policy.pretrained_backbone_weights=null", "--policy.dim_model=256",
       "--policy.n_heads=8", "--policy.dim_feedforward=1024", "--policy.n_encoder_layers=4",
       "--policy.n_decoder_layers=1", "--policy.use_vae=false", "--policy.chunk_size=20",
       "--policy.n_action_steps=10", "--policy.optimizer_lr=1e-4", "--policy.optimizer_lr_backbone=1e-4"]
# SmolVLA at test size (smolvla_config.tiny's VLM), every part trained: with no pretrained VLM a frozen vision
# encoder would be frozen noise. One second of actions per chunk at 20 Hz; the published 10 flow steps.
SMOLVLA = ["--policy.type=smolvla", "--policy.load_vlm_weights=false", "--policy.num_vlm_layers=4",
           "--policy.chunk_size=20", "--policy.n_action_steps=20", "--policy.num_steps=10",
           "--policy.max_state_dim=8", "--policy.max_action_dim=8", "--policy.tokenizer_max_length=16",
           "--policy.resize_imgs_with_padding=[64,64]", "--policy.freeze_vision_encoder=false",
           "--policy.train_expert_only=false"]


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "w") as sink:
        rc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO, env=env).returncode
    if rc != 0:
        sys.exit(f"{cmd[0]} ... exited {rc}: see {log}")


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

    def step(name: str, done: Path, cmd: list[str], env: dict[str, str] | None = None) -> None:
        if done.exists():
            return
        t0 = time.monotonic()
        run(cmd, work / f"{name}.log", env)
        seconds[name] = round(time.monotonic() - t0, 1)

    step("collect", work / "demos", [*cli, "collect", "--episodes", str(args.episodes), "--workers", "2",
                                     "--image-size", "64", "--out", str(work / "demos")])
    step("dataset", work / "lerobot_demos", [*cli, "dataset", "lerobot", str(work / "demos"), "--out",
                                              str(work / "lerobot_demos")])
    recipe, python = ACT, lerobot_python()
    if args.policy == "smolvla":
        words = tuple(sorted({w for t in TASKS.values() for i in t.instructions for w in i.text.split()}))
        if not (work / "vlm").is_dir():
            write_smolvla_vlm(work / "vlm", words)
        recipe, python = [*SMOLVLA, f"--policy.vlm_model_name={work / 'vlm'}"], smolvla_python()
    trained = work / args.policy
    checkpoint = trained / "checkpoints" / "last" / "pretrained_model"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": "disabled", "PYTHONPATH": str(SUPPORT)}
    step("train", checkpoint, [str(python), str(SUPPORT / "lerobot_train.py"), *COMMON, *recipe,
                               f"--dataset.root={work / 'lerobot_demos'}", f"--steps={args.steps}",
                               f"--save_freq={args.steps}", f"--output_dir={trained}"], env)
    bundle = work / f"{args.policy}_bundle"
    extra = (["--instructions", str(work / "lerobot_demos" / "meta" / "omni_vla_instructions.json")]
             if args.policy == "act" else [])
    step("import", bundle, [*cli, "import", "lerobot", str(checkpoint), "--out", str(bundle), "--joint-names",
                            ",".join(PANDA_JOINTS), "--rate-hz", "20", "--gripper", PANDA_JOINTS[-1], *extra])
    print(json.dumps({"seconds": seconds, "checkpoint": str(checkpoint), "bundle": str(bundle)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
