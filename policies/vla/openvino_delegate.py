"""ExecuTorch's OpenVINO delegate: an option of the ExecuTorch backend (`export_vla --delegate openvino`,
`converters.export_pte(..., delegate="openvino")`), and what it takes to export and run it.

    python -m omni_vla_policies.vla.openvino_delegate setup DIR [--precision f32|bf16]
    PYTHONPATH=DIR/py python -m omni_vla_policies.vla.export_vla OUT --backends executorch --delegate openvino
    OPENVINO_LIB_PATH=DIR/libs_t1/libopenvino_c.so.2541 python -m omni_vla_policies.vla.bench_openvino OUT --xnnpack XNN
    PYTHONPATH=DIR/py python -m omni_vla_policies.vla.openvino_delegate act BUNDLE OUT_BUNDLE

The pinned ExecuTorch wheel registers an `OpenvinoBackend` whose library `dlopen`s `libopenvino_c.so`
(OPENVINO_LIB_PATH) when a delegated program loads. Why the set-up is what it is:

- openvino 2025.x, not 2026.x: with 2026.4.1 a delegated program crashed (SIGSEGV) in its first execute; 2025.4.1,
  what the backend's own error asks for (>=2025.1,<2026), runs.
- The export imports nncf (executorch.backends.openvino imports its quantizer): 3.1.0 is the first release that
  imports beside torch 2.13. Both go beside the venv (`DIR/py`), not in it: openvino 2025.4 declares numpy<2.3
  against the venv's 2.4 (it runs with 2.4).
- The backend imports the compiled blob with no properties, so the CPU plugin's defaults apply: bf16 on a CPU with
  AMX / AVX512-BF16 (a Linear of SmolVLA's prefix shape: max error 6.5e-3 against 3.7e-6 at f32) and every core.
  Compile options given at export did not survive the import. OpenVINO reads plugin defaults from plugins.xml
  beside its library, so the set-up makes one library copy per thread count with the precision and thread count set.

Not done: a bundle/runtime option to load delegated programs on the robot (the library path and plugins.xml would be
deployment settings), and what the blob does on another CPU than the one that exported it. Results:
results/vla/README.md, section "ExecuTorch's OpenVINO delegate".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from omni_vla.runtime.bundle import artifact_spec, write_json_atomic
from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import export_pte
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint

REQUIREMENTS = ("openvino==2025.4.1", "nncf==3.1.0", "psutil", "pytorch-tokenizers")
THREADS = (1, 2)
PRECISIONS = ("f32", "bf16")
PLUGINS_XML = """<ie>
    <plugins>
        <plugin name="CPU" location="libopenvino_intel_cpu_plugin.so">
            <properties>
                <property key="INFERENCE_PRECISION_HINT" value="{precision}"/>
                <property key="INFERENCE_NUM_THREADS" value="{threads}"/>
            </properties>
        </plugin>
    </plugins>
</ie>
"""


def setup_key(precision: str = "f32") -> str:
    """What a set-up directory holds, as a short hash: a cache keyed by it is rebuilt when the recipe changes."""
    recipe = json.dumps([REQUIREMENTS, THREADS, PLUGINS_XML, precision])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def setup_openvino(root: Path, precision: str = "f32", python: str = sys.executable) -> Path:
    """root/py: PYTHONPATH for the export (openvino's frontend and nncf); root/libs_tN: OPENVINO_LIB_PATH's directory
    for N inference threads at `precision` (plugins.xml). pip installs with `python`, beside its environment."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--target", str(root / "py"), *REQUIREMENTS],
                   check=True)
    for n in THREADS:
        libs = root / f"libs_t{n}"
        shutil.rmtree(libs, ignore_errors=True)
        shutil.copytree(root / "py" / "openvino" / "libs", libs, symlinks=True)
        (libs / "plugins.xml").write_text(PLUGINS_XML.format(precision=precision, threads=n))
    return root


def plugin_defaults(lib: str | None = None) -> dict[str, str]:
    """The CPU plugin properties plugins.xml beside `lib` (default OPENVINO_LIB_PATH) sets: what the delegate runs with."""
    lib = os.environ.get("OPENVINO_LIB_PATH", "") if lib is None else lib
    xml = Path(lib).parent / "plugins.xml" if lib else None
    if xml is None or not xml.is_file():
        return {}
    return dict(re.findall(r'key="([A-Z_]+)" value="([^"]*)"', xml.read_text()))


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
    s = sub.add_parser("setup", help="install OpenVINO and nncf beside the venv, one plugins.xml per thread count")
    s.add_argument("dir", type=Path)
    s.add_argument("--precision", choices=PRECISIONS, default="f32")
    a = sub.add_parser("act", help="an imported ACT bundle with its ExecuTorch program on the OpenVINO delegate")
    a.add_argument("bundle", type=Path)
    a.add_argument("out", type=Path)
    a.add_argument("--reference-form", action="store_true", help="the plain ActInference, not the ONNX form")
    args = p.parse_args(argv)
    if args.cmd == "setup":
        setup_openvino(args.dir, args.precision)
        print(json.dumps({"dir": str(args.dir), "key": setup_key(args.precision)}))
    else:
        print(json.dumps(relower_act(args.bundle, args.out, args.reference_form)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
