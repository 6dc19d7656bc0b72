"""WORK/vlm (the published SmolVLM2-500M config + a stand-in tokenizer) and WORK/spec.json for smolvla_checkpoint.py.

    python prepare.py WORK TASK [--robot sim]

`--robot sim`: the checkpoint is for the simulated Panda (its 8 joints, its two 128 px cameras) with dataset
statistics centred on its home pose (std 0.05 rad, 2 mm for the finger), so the random-weight policy's actions stay
near home: a checkpoint to run on the sim graph (`ros2 launch omni_vla sim.launch.py`), not to solve a task.

The real SmolVLM2 tokenizer cannot be downloaded here: the tokenizer is a word-level one made with the `tokenizers`
library (BOS from its post-processor, the newline its own token), ids 0..~40, far below the 49280-entry vocabulary.
The token count of a short instruction and so the prefix length are what a real tokenizer would give to within a
few tokens; the padded length (tokenizer_max_length 48) that the exported stages run is identical.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors

ROOT = Path(__file__).resolve().parents[2]
VLM_CONFIG = ROOT / "policies" / "vla" / "smolvlm2_500m_video_instruct.json"
CAMERAS = {"front": [3, 512, 512], "wrist": [3, 512, 512]}
DIM = 6
WORDS = ("pick up the red green blue block cube put it on in stack push pull left right open close drawer gripper "
         "place box bowl cup move to and a of").split()


def write_tokenizer(directory: Path) -> None:
    vocab = {"<pad>": 0, "<unk>": 1, "<bos>": 2, "\n": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "removed"),
                                                 pre_tokenizers.Split("\n", "isolated")])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>",
        "bos_token": "<bos>", "model_max_length": 512}))


def sim_robot() -> dict:
    """The spec fields of the simulated Panda: its cameras, joints and statistics around its home pose."""
    from omni_vla_sim.robot import CAMERAS as SIM_CAMERAS, HOME_QPOS, JOINT_NAMES

    dim = len(JOINT_NAMES)
    std = [0.05] * (dim - 1) + [0.002]
    stats = {"mean": list(HOME_QPOS), "std": std}
    return {"cameras": {c: [3, 128, 128] for c in SIM_CAMERAS}, "state_dim": dim, "action_dim": dim,
            "stats": {"observation.state": stats, "action": stats}, "joint_names": list(JOINT_NAMES)}


def main(work: Path, task: str, robot: str | None = None) -> None:
    vlm = work / "vlm"
    vlm.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(VLM_CONFIG, vlm / "config.json")
    write_tokenizer(vlm)
    # smolvla: LeRobot 0.4.4's defaults throughout (chunk_size 50, num_steps 10, tokenizer_max_length 48,
    # resize_imgs_with_padding [512, 512], num_vlm_layers 16, expert_width_multiplier 0.75): nothing passed.
    spec = {"vlm_dir": str(vlm), "smolvla": {}, "cameras": CAMERAS, "state_dim": DIM, "action_dim": DIM,
            "seed": 7, "task": task, **(sim_robot() if robot == "sim" else {})}
    (work / "spec.json").write_text(json.dumps(spec, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("task")
    ap.add_argument("--robot", choices=["sim"], help="sim: for the simulated Panda (see above)")
    args = ap.parse_args()
    main(args.work, args.task, args.robot)
