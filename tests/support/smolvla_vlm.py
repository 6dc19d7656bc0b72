"""SmolVLA's VLM directory without an image processor (run in LeRobot's venv; never imported by the project).

SmolVLAPolicy reads two image-token ids from its VLM's processor at construction, used only with
add_image_special_tokens (off by default). No hub is reachable here, so the tests' VLM directories hold a config
and a tokenizer made with the `tokenizers` library but no image processor; this stands in for the processor, so
the policy is built alike wherever LeRobot's code builds it (writing a checkpoint, training, serving).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace


class TokenizerOnlyProcessor:
    @staticmethod
    def from_pretrained(*_args, **_kwargs) -> SimpleNamespace:
        return SimpleNamespace(tokenizer=SimpleNamespace(fake_image_token_id=0, global_image_token_id=0))


def stand_in_for(vlm_dir: str | Path) -> bool:
    """Install the stand-in when `vlm_dir` is a local directory without an image processor; True if installed."""
    vlm = Path(vlm_dir)
    if not vlm.is_dir() or (vlm / "preprocessor_config.json").is_file():
        return False
    import lerobot.policies.smolvla.smolvlm_with_expert as swe

    swe.AutoProcessor = TokenizerOnlyProcessor
    return True


def stand_in_for_checkpoint(checkpoint: Path) -> bool:
    """stand_in_for the VLM a SmolVLA checkpoint names (nothing for another policy type)."""
    config = json.loads((checkpoint / "config.json").read_text())
    return config.get("type") == "smolvla" and stand_in_for(config.get("vlm_model_name", ""))
