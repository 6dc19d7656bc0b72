"""The ResNet trunk of the imported ACT stage by stage (stem+pool, layer1..4, 1x1 projection), each exported on its
own and timed interleaved on eager PyTorch, onnxruntime, ExecuTorch and MNN: which convolutions each runtime loses on.

    python experiments/act_speed/trunk_stages.py CHECKPOINT_DIR --threads 1 --reps 60 --json OUT
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from parts import emit, interleaved, load, runners


class Stem(nn.Module):
    def __init__(self, b: nn.Module) -> None:
        super().__init__()
        self.b = b

    def forward(self, x: Tensor) -> Tensor:
        return self.b.pool(torch.relu(self.b.stem(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    ck, model = load(a.checkpoint, a.threads)
    s = ck.shape
    b = model.backbone
    layers = list(b.layers)
    per = len(layers) // 4
    stages = {"stem+pool": Stem(b)}
    for i in range(4):
        stages[f"layer{i + 1}"] = nn.Sequential(*layers[i * per:(i + 1) * per])
    stages["proj1x1"] = model.img_proj
    x = torch.from_numpy(np.random.default_rng(0).normal(0, 1, (s.cameras, 3, *s.image_hw)).astype(np.float32))
    calls, info = {}, {}
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        for name, mod in stages.items():
            mod = mod.eval()
            r, info[name] = runners({"torch": mod, "executorch": mod, "onnx": mod}, (x,), Path(tmp), name.replace("+", "_"), a.threads)
            info[name]["input"] = list(x.shape)
            info[name]["params"] = sum(t.numel() for t in mod.parameters())
            x = mod(x)
            for backend, fn in r.items():
                calls[f"{name}/{backend}"] = fn
        times = interleaved(calls, a.reps, a.warmup)
    out = {"threads": a.threads, "reps": a.reps, "loadavg": os.getloadavg(),
           "median_ms": {k: round(float(np.median(v)), 3) for k, v in times.items()},
           "stages": {k: {"input": v["input"], "params": v["params"], "pte": v["pte"]} for k, v in info.items()}}
    emit(out, a.json)


if __name__ == "__main__":
    main()
