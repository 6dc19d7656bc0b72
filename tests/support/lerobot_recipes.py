"""Training a LeRobot policy on our demonstrations with LeRobot's own entry point, in LeRobot's venv.

The recipes are the command lines docs/lerobot.md gives; benchmarks/lerobot_served/prepare.py trains its
checkpoints of record with them and tests/sim/test_served.py a few steps of SmolVLA's.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lerobot_env import HERE, lerobot_env, lerobot_python, write_smolvla_vlm

COMMON = ("--dataset.repo_id=local/omni_vla", "--policy.device=cpu", "--policy.push_to_hub=false",
          "--wandb.enable=false", "--batch_size=32", "--num_workers=1", "--seed=0")
# docs/lerobot.md's recipe.
ACT = ("--policy.type=act", "--policy.pretrained_backbone_weights=null", "--policy.dim_model=256",
       "--policy.n_heads=8", "--policy.dim_feedforward=1024", "--policy.n_encoder_layers=4",
       "--policy.n_decoder_layers=1", "--policy.use_vae=false", "--policy.chunk_size=20",
       "--policy.n_action_steps=10", "--policy.optimizer_lr=1e-4", "--policy.optimizer_lr_backbone=1e-4")
# SmolVLA at test size (the VLM directory of lerobot_env.write_smolvla_vlm), every part trained: with no pretrained
# VLM a frozen vision encoder would be frozen noise. One second of actions per chunk at 20 Hz; 10 flow steps.
SMOLVLA = ("--policy.type=smolvla", "--policy.load_vlm_weights=false", "--policy.num_vlm_layers=4",
           "--policy.chunk_size=20", "--policy.n_action_steps=20", "--policy.num_steps=10",
           "--policy.max_state_dim=8", "--policy.max_action_dim=8", "--policy.tokenizer_max_length=16",
           "--policy.resize_imgs_with_padding=[64,64]", "--policy.freeze_vision_encoder=false",
           "--policy.train_expert_only=false")
TRAIN = HERE / "lerobot_train.py"


def task_vlm(directory: Path) -> Path:
    """A test-size SmolVLM directory whose tokenizer knows every word of the simulator's instructions."""
    from omni_vla_sim.tasks import TASKS

    words = sorted({w for t in TASKS.values() for i in t.instructions for w in i.text.split()})
    return write_smolvla_vlm(directory, tuple(words))


def train(policy: str, dataset: Path, out: Path, steps: int, vlm: Path | None = None, log: Path | None = None,
          timeout: float = 7200) -> Path:
    """lerobot_train on `dataset` into `out`; the last checkpoint's pretrained_model directory. Raises with the
    log's tail when training fails."""
    recipe = {"act": ACT, "smolvla": SMOLVLA}[policy]
    if policy == "smolvla":
        if vlm is None:
            raise ValueError("smolvla needs its VLM directory (lerobot_env.write_smolvla_vlm)")
        recipe = (*recipe, f"--policy.vlm_model_name={vlm}")
    env = lerobot_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"), HF_HUB_OFFLINE="1",
                      WANDB_MODE="disabled", PYTHONPATH=str(HERE))
    log = log or out.parent / f"{out.name}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink:
        rc = subprocess.run([str(lerobot_python()), str(TRAIN), *COMMON, *recipe, f"--dataset.root={dataset}",
                             f"--steps={steps}", f"--save_freq={steps}", f"--output_dir={out}"],
                            stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
    if rc != 0:
        raise RuntimeError(f"lerobot_train {policy} exited {rc}:\n{log.read_text()[-3000:]}")
    return out / "checkpoints" / "last" / "pretrained_model"
