"""A LeRobot ACT checkpoint to start training from, its ResNet statistics measured on our frames.

Run in LeRobot's own venv (tests/support/lerobot_env.py builds it). LeRobot's ACT builds its ResNet with
FrozenBatchNorm2d: with no pretrained weights to download, every norm starts as the identity and stays frozen,
so nothing in the trunk is normalised and the residual stream's scale grows block by block. This writes the
checkpoint LeRobot itself would write for the recipe (`ACTPolicy.save_pretrained` + its processors), except that
each FrozenBatchNorm2d holds the per-channel mean and variance of its input over a sample of the dataset's frames,
measured in order through the trunk (a data-dependent initialisation; nothing is trained here). Training then
starts from it with LeRobot's own entry point: `lerobot_train --policy.path=OUT ...`.

    python normalised_init.py DATASET_ROOT OUT [--frames 256] [--seed 0] [--act '{"dim_model": 256, ...}']
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

RECIPE = {"chunk_size": 20, "n_action_steps": 10, "dim_model": 256, "n_heads": 8, "dim_feedforward": 1024,
          "n_encoder_layers": 4, "n_decoder_layers": 1, "use_vae": False, "optimizer_lr": 1e-4,
          "optimizer_lr_backbone": 1e-4}


def _frames(dataset, n: int, seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(dataset), size=n, replace=False)
    items = [dataset[int(i)] for i in idx]
    return {k: torch.stack([it[k] for it in items]) for k in items[0] if isinstance(items[0][k], torch.Tensor)}


def _measure_norms(backbone: torch.nn.Module, images: torch.Tensor) -> list[str]:
    """Each FrozenBatchNorm2d takes its input's statistics in the same pass, before it runs (so later norms see
    normalised earlier layers)."""
    from torchvision.ops.misc import FrozenBatchNorm2d

    done: list[str] = []

    def hook(name: str):
        def pre(module: FrozenBatchNorm2d, args: tuple[torch.Tensor]) -> None:
            x = args[0]
            module.running_mean.copy_(x.mean(dim=(0, 2, 3)))
            module.running_var.copy_(x.var(dim=(0, 2, 3), unbiased=False))
            done.append(name)
        return pre

    handles = [m.register_forward_pre_hook(hook(n)) for n, m in backbone.named_modules()
               if isinstance(m, FrozenBatchNorm2d)]
    with torch.no_grad():
        backbone(images)
    for h in handles:
        h.remove()
    return done


def main() -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset_root", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--frames", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--act", default="{}", help="ACTConfig fields over the recipe's, as JSON")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    dataset = LeRobotDataset("local/omni_vla", root=args.dataset_root)
    cfg = ACTConfig(**{**RECIPE, **json.loads(args.act)}, pretrained_backbone_weights=None, device="cpu",
                    push_to_hub=False)
    policy = make_policy(cfg, ds_meta=dataset.meta)
    pre, post = make_pre_post_processors(cfg, dataset_stats=dataset.meta.stats)
    batch = pre(_frames(dataset, args.frames, args.seed))
    images = torch.cat([batch[k] for k in cfg.image_features], dim=0)
    names = _measure_norms(policy.model.backbone, images)
    args.out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(args.out)
    pre.save_pretrained(args.out)
    post.save_pretrained(args.out)
    print(json.dumps({"out": str(args.out), "frames": args.frames, "images": int(images.shape[0]),
                      "norms_measured": len(names), "cameras": list(cfg.image_features)}))


if __name__ == "__main__":
    main()
