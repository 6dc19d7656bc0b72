"""ResNet layer4 + the 1x1 input projection of the imported ACT (2x2 feature maps, batch = cameras) two ways, timed
interleaved on eager PyTorch, onnxruntime, ExecuTorch and MNN: as convolutions (the reference form), and with the
3x3 stride-1 convolutions written as im2col (pad + 9 slices) + one Linear over [cameras*4, 9*C] (same weights, the
same bytes streamed). At batch 1-2 these layers are 8-row GEMMs over 9.4 MB weights each; the question is which
kernel each runtime picks for them.

    python experiments/act_speed/small_map_convs.py CHECKPOINT_DIR --threads 1 --reps 60
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from parts import interleaved, runners
from omni_vla_policies.act_model import ActInference
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint


def conv3x3_im2col(x: Tensor, w2d: Tensor, bias: Tensor) -> Tensor:
    """A 3x3 stride-1 pad-1 convolution as patches [B*H*W, C*9] @ W^T (pad + 9 static slices + one Linear);
    w2d: the weights as [out, C*9], a constant (XNNPACK delegates a Linear only with constant weights)."""
    b, c, h, w = x.shape
    xp = F.pad(x, (1, 1, 1, 1))
    patches = torch.stack([xp[:, :, dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)], dim=2)
    rows = patches.permute(0, 3, 4, 1, 2).reshape(b * h * w, c * 9)
    y = F.linear(rows, w2d, bias)
    return y.reshape(b, h, w, -1).permute(0, 3, 1, 2)


class Layer4(nn.Module):
    def __init__(self, model: ActInference, im2col: bool) -> None:
        super().__init__()
        per = len(model.backbone.layers) // 4
        self.blocks, self.proj, self.im2col = model.backbone.layers[3 * per:], model.img_proj, im2col
        self.w2d = nn.ParameterDict()
        for i, blk in enumerate(self.blocks):
            for name in ("conv1", "conv2"):
                w = getattr(blk, name).conv.weight
                self.w2d[f"{i}_{name}"] = nn.Parameter(w.detach().reshape(w.shape[0], -1).clone())

    def _conv(self, x: Tensor, i: int, name: str, blk: nn.Module) -> Tensor:
        conv = getattr(blk, name).conv
        if self.im2col and conv.kernel_size == (3, 3) and conv.stride == (1, 1):
            return conv3x3_im2col(x, self.w2d[f"{i}_{name}"], conv.bias)
        return conv(x)

    def forward(self, x: Tensor) -> Tensor:
        for i, blk in enumerate(self.blocks):
            skip = x if blk.down is None else blk.down(x)
            x = torch.relu(self._conv(torch.relu(self._conv(x, i, "conv1", blk)), i, "conv2", blk) + skip)
        return self.proj(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=60)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from executorch.extension.pybindings import portable_lib  # optional: analysis only
    portable_lib._unsafe_reset_threadpool(a.threads)
    ck = read_act_checkpoint(a.checkpoint)
    model = ActInference(ck.weights, ck.shape).eval()
    x = torch.from_numpy(np.random.default_rng(0).normal(0, 1, (ck.shape.cameras, 256, 4, 4)).astype(np.float32))
    calls, info = {}, {}
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        for name, im2col in (("conv", False), ("im2col", True)):
            m = Layer4(model, im2col).eval()
            r, info[name] = runners({"torch": m, "executorch": m, "onnx": m}, (x,), Path(tmp), name, a.threads)
            calls.update({f"{name}/{k}": f for k, f in r.items()})
        times = interleaved(calls, a.reps, 10)
    print(json.dumps({"threads": a.threads, "loadavg": os.getloadavg(),
                      "median_ms": {k: round(float(np.median(v)), 3) for k, v in times.items()},
                      "pte": {k: v["pte"] for k, v in info.items()},
                      "max_abs_vs_torch": {k: v["max_abs_vs_torch"] for k, v in info.items()}}, indent=1))


if __name__ == "__main__":
    main()
