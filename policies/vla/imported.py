"""What every staged VLA imported from a LeRobot checkpoint (SmolVLA, pi0, pi0.5) puts in its bundle the same way:
the robot-side manifest fields, and the export -> tokenizer -> manifest -> measured parity sequence that writes it.

The model-specific importers (policies/lerobot_smolvla.py, policies/lerobot_pi0.py) read their checkpoint and
say what differs: the policy name, the source record, the language block.
"""
from __future__ import annotations

import json
import multiprocessing
import shutil
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

import numpy as np
from torch import nn

from omni_vla.backends import ARTIFACT_FORMATS, ROBOT_BACKENDS, SUFFIX_OF
from omni_vla.runtime.bundle import artifact_spec, write_json_atomic
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT
from omni_vla.runtime.vla_manifest import VLA_KIND, VLAManifest
from omni_vla.tools.outputs import native_stdout_silenced
from omni_vla_policies.converters import versions
from omni_vla_policies.lerobot_checkpoint import Affine, CheckpointError, new_bundle_dir
from omni_vla_policies.vla.bundle_vla import stage_specs
from omni_vla_policies.vla.export_vla import export_stages
from omni_vla_policies.vla.parity_import import self_parity


def floats(a: Any) -> list[float]:
    return [float(v) for v in np.asarray(a, np.float32).reshape(-1)]


def vla_manifest(*, policy: str, source: dict, arch: Any, cameras: list[str], tmp: Path, joint_names: list[str],
                 rate_hz: float, gripper: str | None, backends: tuple[str, ...], execute_steps: int, state: Affine,
                 action: Affine, language: dict) -> VLAManifest:
    """The manifest of an imported staged VLA: its stages' artifacts in `tmp`, the robot's joints (metres for the
    gripper), the checkpoint's normalisation and the flow schedule."""
    h, w = arch.camera_shape
    units = ["m" if n == gripper else "rad" for n in joint_names]
    flops = json.loads((tmp / "export.json").read_text()).get("flops", {})
    stages = {stage: {"inputs": ins, "outputs": outs, "flops": flops.get(stage),
                      "artifacts": {b: artifact_spec(tmp, f"{stage}.{SUFFIX_OF[b]}").model_dump() for b in backends}}
              for stage, (ins, outs) in stage_specs(arch).items()}
    return VLAManifest.model_validate({
        "format": CHUNK_FORMAT, "kind": VLA_KIND, "policy": policy,
        "source": {**source, "architecture": arch.model_dump(mode="json")},
        "control_rate_hz": rate_hz,
        "cameras": [{"name": c, "height": h, "width": w} for c in cameras],
        "state": {"joint_names": joint_names, "units": units},
        "action": {"joint_names": joint_names, "units": units, "space": "absolute", "chunk_length": arch.chunk_size,
                   "execute_steps": execute_steps, "gripper": gripper},
        "normalization": {"state": {"subtract": floats(state.subtract), "divide": floats(state.divide)},
                          "action": {"subtract": floats(action.subtract), "divide": floats(action.divide)}},
        "language": {"max_tokens": arch.tokenizer_max_length,
                     "tokenizer_file": artifact_spec(tmp, "tokenizer.json").model_dump(), **language},
        "flow": {"num_steps": arch.num_steps, "padded_state_dim": arch.max_state_dim,
                 "padded_action_dim": arch.max_action_dim, "max_prefix": arch.chunk_size - 1},
        "stages": stages, "versions": versions(),
    })


QUANTIZATION = {"int8": "ExecuTorch: int8 weights per output channel and int8 activations quantised per call "
                        "(torchao, XNNPACK); MNN: int8 weights (--weightQuantBits 8); onnxruntime: dynamic int8"}


def _export(build: Callable[[], nn.Module], tmp: Path, backends: tuple[str, ...], int8: bool, delegate: str,
            conn: Connection) -> None:
    try:
        export_stages(build(), tmp, backends=backends, log=lambda _s: None, int8=int8, in_place=int8,
                      delegate=delegate)
    except Exception as exc:  # noqa: BLE001 - reported by the parent in one line
        conn.send(f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")
        raise SystemExit(1) from None
    conn.send("")


def export_apart(build: Callable[[], nn.Module], tmp: Path, backends: tuple[str, ...], int8: bool = True,
                 delegate: str = "xnnpack") -> None:
    """The export in a process of its own. Quantising in place leaves memory this process would keep (a full-size
    pi0: 9 GB after its 13 GB float build), so the float build the parity needs next starts clean; the OpenVINO
    delegate's export loads OpenVINO's own libraries, which would then shadow the ones the runtime configures."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_export, args=(build, tmp, backends, int8, delegate, send), name="export")
    proc.start()
    send.close()
    try:
        error = recv.recv()
    except EOFError:
        error = "it ended without a result"
    proc.join()
    if error or proc.exitcode != 0:
        killed = f" (killed by signal {-proc.exitcode}: out of memory?)" if (proc.exitcode or 0) < 0 else ""
        raise CheckpointError(f"the {'int8 ' if int8 else ''}export failed{killed}: {error}")


def write_imported_bundle(build: Callable[[], nn.Module], out: Path, tokenizer: Path, backends: tuple[str, ...],
                          manifest_for: Callable[[Path, tuple[str, ...]], VLAManifest],
                          int8: bool = False, delegate: str = "xnnpack") -> VLAManifest:
    """Export every stage of the model `build` makes (a picklable callable) for `backends` (MNN converts from ONNX,
    so the .onnx is listed too), ship the tokenizer, write the manifest, then measure each robot runtime's chunk
    against the eager fp32 model on one observation and record it (source.parity_db): `out` appears only when all
    of that succeeded. An int8 export quantises the model in place in a process of its own, and the parity is
    measured against a second, float build. `delegate`: what ExecuTorch's programs are lowered to (XNNPACK, or
    OpenVINO, which the runtime then configures on load; float32 only)."""
    if int8 and delegate != "xnnpack":
        raise CheckpointError(f"--quantize int8 with --delegate {delegate}: int8 variants are lowered to XNNPACK only")
    listed = tuple(dict.fromkeys((*backends, "onnx") if "mnn" in backends else backends))
    formats = tuple(b for b in ARTIFACT_FORMATS if b in listed)
    with new_bundle_dir(out) as tmp:
        if int8 or delegate != "xnnpack":
            export_apart(build, tmp, formats, int8=int8, delegate=delegate)
            reference = build
        else:
            model = build()
            export_stages(model, tmp, backends=formats, log=lambda _s: None)
            reference = lambda: model  # noqa: E731 - the float model exported is the reference
        shutil.copyfile(tokenizer, tmp / "tokenizer.json")
        manifest = manifest_for(tmp, listed)
        if delegate != "xnnpack" and "executorch" in listed:
            data = manifest.model_dump(mode="json")
            for stage in data["stages"].values():
                stage["artifacts"]["executorch"]["delegate"] = delegate
            manifest = VLAManifest.model_validate(data)
        write_json_atomic(tmp / "manifest.json", manifest.model_dump(mode="json"))
        with native_stdout_silenced():  # MNN prints to fd 1
            parity = self_parity(tmp, reference, tuple(b for b in backends if b in ROBOT_BACKENDS))
        manifest = manifest.model_copy(update={"source": {**manifest.source, "parity_db": parity,
                                                          "quantization": QUANTIZATION["int8"] if int8 else "none"}})
        write_json_atomic(tmp / "manifest.json", manifest.model_dump(mode="json"))
    return manifest
