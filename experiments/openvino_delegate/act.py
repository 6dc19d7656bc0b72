"""An imported ACT bundle with its ExecuTorch program lowered to ExecuTorch's OpenVINO delegate instead of XNNPACK.

    python experiments/openvino_delegate/act.py BUNDLE OUT_BUNDLE      # needs openvino 2025.x + nncf (README.md)
    python experiments/act_speed/gap_sweep.py OUT_BUNDLE torch,onnxruntime,executorch 0,30 100

OUT_BUNDLE is BUNDLE with policy.pte replaced (the manifest's hash and size updated); MNN and ONNX are hard links.
The network is the one the importer exports for ONNX (`act_export_form(..., xnnpack=False)`: native LayerNorm),
or with ACT_FORM=reference the plain `ActInference`.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import torch

from omni_vla.runtime.bundle import artifact_spec, write_json_atomic
from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import export_pte
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint


def main() -> int:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    manifest = json.loads((src / "manifest.json").read_text())
    ck = read_act_checkpoint(manifest["source"]["checkpoint"])
    s = ck.shape
    model = ActInference(ck.weights, s).eval()
    args = tuple(torch.zeros(1, 3, *s.image_hw) for _ in ck.cameras) + (torch.zeros(1, s.state_dim),)
    if s.env_dim:
        args = args + (torch.zeros(1, s.env_dim),)
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in ("policy.pte", "manifest.json"):
            os.link(f, out / f.name)
    with torch.no_grad():
        form = model if os.environ.get("ACT_FORM") == "reference" else act_export_form(model, xnnpack=False)
        export_pte(form, args, out / "policy.pte", delegate="openvino")
    for stage in manifest["stages"].values():
        if "executorch" in stage["artifacts"]:
            stage["artifacts"]["executorch"] = artifact_spec(out, "policy.pte").model_dump()
    write_json_atomic(out / "manifest.json", manifest)
    print(json.dumps({"bundle": str(out), "pte_bytes": (out / "policy.pte").stat().st_size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
