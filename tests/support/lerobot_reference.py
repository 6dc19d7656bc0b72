"""LeRobot's own ACT, run in LeRobot's own environment (never imported by the project or its tests' interpreter).

    python lerobot_reference.py checkpoint OUT_DIR SPEC.json   # a random-initialised ACT saved as training saves it
    python lerobot_reference.py infer CHECKPOINT_DIR IN.npz OUT.npz

`checkpoint` writes what `lerobot-train` writes into `checkpoints/<step>/pretrained_model/`: the policy
(config.json + model.safetensors, `save_pretrained`) and its pre/post-processor pipelines with the dataset
statistics (`policy_preprocessor*.json/.safetensors`). `infer` loads that directory with LeRobot's own loaders
and runs preprocessor -> ACTPolicy.predict_action_chunk -> postprocessor on the saved raw inputs: the reference
that the importer's parity is measured against.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch


def make_checkpoint(out: Path, spec: dict) -> None:
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(spec["seed"])
    size = spec["image_size"]
    inputs = {f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, (3, size[0], size[1]))
              for c in spec["cameras"]}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (spec["state_dim"],))
    if spec.get("env_dim"):
        inputs["observation.environment_state"] = PolicyFeature(FeatureType.ENV, (spec["env_dim"],))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (spec["action_dim"],))}
    extra = {"normalization_mapping": {k: NormalizationMode(v) for k, v in spec["norm"].items()}} if "norm" in spec else {}
    cfg = ACTConfig(input_features=inputs, output_features=outputs, pretrained_backbone_weights=None,
                    device="cpu", push_to_hub=False, **spec["act"], **extra)
    policy = ACTPolicy(cfg)
    with torch.no_grad():  # FrozenBatchNorm2d buffers start at identity: give them real statistics
        for name, buf in policy.named_buffers():
            if name.endswith("running_mean"):
                buf.normal_(0.0, 0.1)
            elif name.endswith("running_var"):
                buf.uniform_(0.5, 1.5)
    rng = np.random.default_rng(spec["seed"])
    stats: dict[str, dict[str, torch.Tensor]] = {}
    for c in spec["cameras"]:
        stats[f"observation.images.{c}"] = {
            "mean": torch.tensor(rng.uniform(0.3, 0.6, (3, 1, 1)), dtype=torch.float32),
            "std": torch.tensor(rng.uniform(0.15, 0.3, (3, 1, 1)), dtype=torch.float32)}
    dims = [("observation.state", spec["state_dim"]), ("action", spec["action_dim"])]
    dims += [("observation.environment_state", spec["env_dim"])] if spec.get("env_dim") else []
    for key, dim in dims:
        stats[key] = {"mean": torch.tensor(rng.normal(0, 0.5, dim), dtype=torch.float32),
                      "std": torch.tensor(rng.uniform(0.05, 0.5, dim), dtype=torch.float32),
                      "min": torch.tensor(rng.uniform(-3, -1, dim), dtype=torch.float32),
                      "max": torch.tensor(rng.uniform(1, 3, dim), dtype=torch.float32)}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)


def infer(checkpoint: Path, inputs: Path, out: Path) -> None:
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    policy = ACTPolicy.from_pretrained(checkpoint)
    policy.eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(checkpoint))
    data = np.load(inputs)
    n = data["observation.state"].shape[0]
    chunks = []
    with torch.no_grad():
        for i in range(n):  # one observation at a time, as a robot asks
            batch = {k: torch.from_numpy(np.ascontiguousarray(data[k][i])) for k in data.files}
            chunk = policy.predict_action_chunk(pre(batch))
            chunks.append(post(chunk).numpy())
    np.savez(out, actions=np.concatenate(chunks, axis=0), torch=np.array(torch.__version__))


if __name__ == "__main__":
    verb, *rest = sys.argv[1:]
    if verb == "checkpoint":
        make_checkpoint(Path(rest[0]), json.loads(Path(rest[1]).read_text()))
    elif verb == "infer":
        infer(Path(rest[0]), Path(rest[1]), Path(rest[2]))
    else:
        sys.exit(f"unknown verb {verb!r}: expected checkpoint or infer")
