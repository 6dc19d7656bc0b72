"""WORK/vlm (the published SmolVLM2-500M config + a stand-in tokenizer) and WORK/spec.json for smolvla_checkpoint.py.

    python prepare.py WORK TASK

The real SmolVLM2 tokenizer cannot be downloaded here: the tokenizer is a word-level one made with the `tokenizers`
library (BOS from its post-processor, the newline its own token), ids 0..~40, far below the 49280-entry vocabulary.
The token count of a short instruction and so the prefix length are what a real tokenizer would give to within a
few tokens; the padded length (tokenizer_max_length 48) that the exported stages run is identical.
"""
from __future__ import annotations

import json
import shutil
import sys
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


def main(work: Path, task: str) -> None:
    vlm = work / "vlm"
    vlm.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(VLM_CONFIG, vlm / "config.json")
    write_tokenizer(vlm)
    # smolvla: LeRobot 0.4.4's defaults throughout (chunk_size 50, num_steps 10, tokenizer_max_length 48,
    # resize_imgs_with_padding [512, 512], num_vlm_layers 16, expert_width_multiplier 0.75): nothing passed.
    spec = {"vlm_dir": str(vlm), "smolvla": {}, "cameras": CAMERAS, "state_dim": DIM, "action_dim": DIM,
            "seed": 7, "task": task}
    (work / "spec.json").write_text(json.dumps(spec, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: prepare.py WORK TASK")
    main(Path(sys.argv[1]), sys.argv[2])
