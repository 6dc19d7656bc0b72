"""A SmolVLA checkpoint written by LeRobot's own code, and what LeRobot's own pipeline makes of one observation.

    python smolvla_checkpoint.py OUT_DIR SPEC.json      (in lerobot_env.lerobot_python(); never imported here)

SPEC: {"vlm_dir": a directory holding the VLM's config.json and a tokenizer (tokenizer.json +
tokenizer_config.json), "smolvla": SmolVLAConfig fields, "cameras": {name: [3, h, w]}, "state_dim", "action_dim",
"seed", "task", optionally "stats": {"observation.state" | "action": {"mean": [...], "std": [...]}} (a robot's
dataset statistics; otherwise seeded random ones)}. Writes OUT_DIR/pretrained_model/ exactly as `lerobot-train` does (SmolVLAPolicy.save_pretrained
and the pre/post-processor pipelines of make_smolvla_pre_post_processors with seeded dataset statistics), then
runs one raw observation through preprocessor -> predict_action_chunk -> postprocessor and writes OUT_DIR/io.npz:
the raw inputs, the noise, the tokens LeRobot's tokenizer step made, and the raw (unnormalised) actions.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from smolvla_vlm import TokenizerOnlyProcessor  # noqa: E402


def _stats(rng: np.random.Generator, dim: int, given: dict | None) -> dict[str, torch.Tensor]:
    mean = rng.normal(0.0, 0.5, dim).astype(np.float32)
    std = rng.uniform(0.2, 1.5, dim).astype(np.float32)
    if given is not None:
        mean, std = np.asarray(given["mean"], np.float32), np.asarray(given["std"], np.float32)
    return {"mean": torch.from_numpy(mean), "std": torch.from_numpy(std), "min": torch.from_numpy(mean - 2 * std),
            "max": torch.from_numpy(mean + 2 * std)}


@torch.no_grad()
def main(out: Path, spec: dict) -> None:
    import lerobot.policies.smolvla.smolvlm_with_expert as swe
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors
    from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

    swe.AutoProcessor = TokenizerOnlyProcessor
    inputs = {f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, tuple(s)) for c, s in spec["cameras"].items()}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (spec["state_dim"],))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (spec["action_dim"],))}
    cfg = SmolVLAConfig(input_features=inputs, output_features=outputs, vlm_model_name=spec["vlm_dir"],
                        load_vlm_weights=False, device="cpu", **spec["smolvla"])
    torch.manual_seed(spec["seed"])
    policy = SmolVLAPolicy(cfg).eval()
    rng = np.random.default_rng(spec["seed"])
    given = spec.get("stats", {})
    stats = {key: _stats(rng, spec[dim], given.get(key))
             for key, dim in (("observation.state", "state_dim"), ("action", "action_dim"))}
    pre, post = make_smolvla_pre_post_processors(cfg, stats)
    ckpt = out / "pretrained_model"
    policy.save_pretrained(ckpt)
    pre.save_pretrained(ckpt)
    post.save_pretrained(ckpt)

    images = {c: rng.random(tuple(s), dtype=np.float32) for c, s in spec["cameras"].items()}
    state = rng.normal(0.0, 1.0, spec["state_dim"]).astype(np.float32)
    raw = {f"observation.images.{c}": torch.from_numpy(im) for c, im in images.items()}
    raw["observation.state"] = torch.from_numpy(state)
    raw["task"] = spec["task"]
    batch = pre(raw)
    noise = np.zeros((1, cfg.chunk_size, cfg.max_action_dim), np.float32)
    noise[:, :, :spec["action_dim"]] = rng.standard_normal((1, cfg.chunk_size, spec["action_dim"]))
    actions = post(policy.predict_action_chunk(batch, noise=torch.from_numpy(noise))).numpy()
    np.savez(out / "io.npz", state=state, noise=noise[:, :, :spec["action_dim"]], actions=actions,
             lang_tokens=batch[OBS_LANGUAGE_TOKENS].numpy(), lang_mask=batch[OBS_LANGUAGE_ATTENTION_MASK].numpy(),
             **{f"image.{c}": im for c, im in images.items()})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: smolvla_checkpoint.py OUT_DIR SPEC.json")
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
