"""ExecuTorch's OpenVINO delegate: an option of the ExecuTorch backend (`omni-vla import lerobot ... --delegate
openvino`, `export_vla --delegate openvino`, `converters.export_pte(..., delegate="openvino")`), and its install.

    make setup-openvino          (= python -m omni_vla_policies.vla.openvino_delegate setup [DIR])
    python -m omni_vla_policies.vla.export_vla OUT --backends executorch --delegate openvino
    python -m omni_vla_policies.vla.openvino_delegate act BUNDLE OUT_BUNDLE

The pinned ExecuTorch wheel registers an `OpenvinoBackend` whose library `dlopen`s `libopenvino_c.so`
(OPENVINO_LIB_PATH) when a delegated program loads; the robot runtime points it at a copy of the install's libraries
with the bundle's precision and the node's thread count (omni_vla/runtime/openvino.py, which says why). The install:

- openvino 2025.x, not 2026.x: with 2026.4.1 a delegated program crashed (SIGSEGV) in its first execute; 2025.4.1,
  what the backend's own error asks for (>=2025.1,<2026), runs.
- The export imports nncf (executorch.backends.openvino imports its quantizer): 3.1.0 is the first release that
  imports beside torch 2.13. Both go beside the venv (`DIR/py`, which the export puts on sys.path itself), not in it:
  openvino 2025.4 declares numpy<2.3 against the venv's 2.4 (it runs with 2.4), and the robot loads only its C
  libraries. So it is a make target, not a pip extra (an extra would downgrade the venv's numpy).

Results: results/vla/README.md, section "ExecuTorch's OpenVINO delegate".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from omni_vla.runtime.bundle import artifact_spec, write_json_atomic
from omni_vla.runtime.openvino import DEFAULT_DIR, ENV_DIR, installed_libs, openvino_dir
from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import export_pte
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint

REQUIREMENTS = ("openvino==2025.4.1", "nncf==3.1.0", "psutil", "pytorch-tokenizers")


def setup_key() -> str:
    """What a set-up directory holds, as a short hash: a cache keyed by it is rebuilt when the recipe changes."""
    return hashlib.sha256(json.dumps(REQUIREMENTS).encode()).hexdigest()[:16]


def setup_openvino(root: Path | None = None, python: str = sys.executable) -> Path:
    """root/py (default: the runtime's OpenVINO directory): openvino and nncf from PyPI, for the export (sys.path)
    and the runtime (its libs). pip installs with `python`, beside its environment."""
    root = openvino_dir() if root is None else root
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(root / "py"), *REQUIREMENTS],
                   check=True)
    installed_libs(root)  # the wheel's layout is what the runtime expects
    return root


def relower_act(src: Path, out: Path, reference_form: bool = False) -> dict:
    """An imported ACT bundle with policy.pte lowered to the OpenVINO delegate instead of XNNPACK (the manifest's hash
    and size updated; the other files hard-linked). The network is the importer's ONNX form (native LayerNorm), or
    with `reference_form` the plain ActInference."""
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
        export_pte(model if reference_form else act_export_form(model, xnnpack=False), args, out / "policy.pte",
                   delegate="openvino")
    for stage in manifest["stages"].values():
        if "executorch" in stage["artifacts"]:
            stage["artifacts"]["executorch"] = artifact_spec(out, "policy.pte").model_dump()
    write_json_atomic(out / "manifest.json", manifest)
    return {"bundle": str(out), "pte_bytes": (out / "policy.pte").stat().st_size}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="install OpenVINO and nncf beside the venv")
    s.add_argument("dir", type=Path, nargs="?", default=None, help=f"default: {ENV_DIR} or {DEFAULT_DIR}")
    a = sub.add_parser("act", help="an imported ACT bundle with its ExecuTorch program on the OpenVINO delegate")
    a.add_argument("bundle", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--reference-form", action="store_true", help="the plain ActInference, not the ONNX form")
    args = p.parse_args(argv)
    if args.cmd == "setup":
        print(json.dumps({"dir": str(setup_openvino(args.dir)), "key": setup_key()}))
    else:
        print(json.dumps(relower_act(args.bundle, args.out, args.reference_form)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
