"""LeRobot's own training entry point, `lerobot.scripts.lerobot_train`, with its command line unchanged.

    python lerobot_train.py --policy.type=smolvla --policy.vlm_model_name=VLM_DIR ... (in a LeRobot venv)

The one addition: a SmolVLA whose VLM directory holds no image processor (the tests' tokenizer-only VLMs; no hub is
reachable) gets smolvla_vlm's stand-in, as when its checkpoint is written or served.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

from smolvla_vlm import stand_in_for  # noqa: E402

if __name__ == "__main__":
    for arg in sys.argv[1:]:
        if arg.startswith("--policy.vlm_model_name="):
            stand_in_for(arg.split("=", 1)[1])
    from lerobot.scripts.lerobot_train import main

    main()
