"""`omni-vla import lerobot CHECKPOINT_DIR --out BUNDLE --joint-names a,b,... --rate-hz F`: a LeRobot checkpoint
becomes a bundle for ExecuTorch and MNN; the policy kind is read from its config.json (KINDS). An ACT becomes a
kind-"chunk" bundle (format 3), a SmolVLA a kind-"vla" bundle (policies/lerobot_smolvla.py), and so do pi0 and
pi0.5 (policies/lerobot_pi0.py).

The graph is ACT alone (policies/act_model.py, loaded from the checkpoint's safetensors), exported in its export form
(act_export_form: one for XNNPACK, one for ONNX/MNN; the same function); LeRobot's normalisation pipelines become the
manifest's affine maps, applied by the runtime. The bundle is written into a temporary
directory beside BUNDLE and renamed into place at the end: a failed import leaves nothing behind.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from omni_vla.backends import ROBOT_BACKENDS, SUFFIX_OF
from omni_vla.runtime.bundle import TensorSpec, artifact_spec, sha256_file, write_json_atomic
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT, CHUNK_STAGE, ChunkManifest
from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import DELEGATES, convert_mnn, export_onnx, export_pte, versions
from omni_vla_policies.lerobot_checkpoint import (ActCheckpoint, CheckpointError, check_robot, new_bundle_dir,
                                                   read_act_checkpoint, read_json)
from omni_vla_policies.lerobot_pi0 import import_pi0
from omni_vla_policies.lerobot_smolvla import import_smolvla

BACKENDS = ROBOT_BACKENDS  # what an imported bundle holds: the robot runtimes' programs
KINDS = ("act", "smolvla", "pi0", "pi05")  # LeRobot's config.json "type" values this importer converts


def _affine(a: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(a, np.float32).reshape(-1)]


def read_instructions(path: Path | None, env_dim: int) -> dict | None:
    """The instruction table of a policy conditioned through observation.environment_state:
    {"names": [...], "table": {instruction text: vector}} (the dataset converter writes one)."""
    if env_dim == 0:
        if path is not None:
            raise CheckpointError(f"--instructions {path}: the checkpoint has no observation.environment_state input")
        return None
    if path is None:
        raise CheckpointError(f"the checkpoint takes a {env_dim}-value observation.environment_state; expected "
                              "--instructions FILE.json mapping each instruction to its vector")
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"--instructions {path}: {exc}") from exc
    if not isinstance(spec, dict) or len(spec.get("names", [])) != env_dim or not spec.get("table"):
        raise CheckpointError(f"--instructions {path}: expected {{\"names\": [{env_dim} names], \"table\": "
                              "{text: vector}}")
    return {"names": spec["names"], "table": spec["table"]}


def build_manifest(ck: ActCheckpoint, joint_names: list[str], rate_hz: float, gripper: str | None,
                   artifacts: dict, checkpoint_dir: Path, instructions: dict | None = None) -> ChunkManifest:
    s = ck.shape
    units = ["m" if n == gripper else "rad" for n in joint_names]
    inputs = [TensorSpec(name=c, shape=(1, 3, *s.image_hw), dtype="float32") for c in ck.cameras]
    inputs.append(TensorSpec(name="state", shape=(1, s.state_dim), dtype="float32"))
    if s.env_dim:
        inputs.append(TensorSpec(name="environment_state", shape=(1, s.env_dim), dtype="float32"))
    norm = {k: {"subtract": _affine(a.subtract), "divide": _affine(a.divide)} for k, a in ck.inputs.items()}
    norm["action"] = {"subtract": _affine(ck.action.subtract), "divide": _affine(ck.action.divide)}
    return ChunkManifest.model_validate({
        "format": CHUNK_FORMAT, "kind": "chunk", "policy": "lerobot_act",
        "source": {"checkpoint": str(checkpoint_dir), "weights_sha256": sha256_file(checkpoint_dir / "model.safetensors"),
                   "config": ck.config},
        "control_rate_hz": rate_hz,
        "cameras": [{"name": c, "height": s.image_hw[0], "width": s.image_hw[1]} for c in ck.cameras],
        "state": {"joint_names": joint_names, "units": units},
        "action": {"joint_names": joint_names, "units": units, "space": "absolute", "chunk_length": s.chunk_size,
                   "execute_steps": ck.n_action_steps, "gripper": gripper},
        "instruction_input": instructions,
        "normalization": norm,
        "stages": {CHUNK_STAGE: {"inputs": [t.model_dump() for t in inputs],
                                 "outputs": [{"name": "actions", "shape": (1, s.chunk_size, s.action_dim), "dtype": "float32"}],
                                 "artifacts": artifacts}},
        "versions": versions(),
    })


def import_act(checkpoint_dir: str | Path, out: str | Path, joint_names: list[str], rate_hz: float,
               gripper: str | None = None, backends: tuple[str, ...] = BACKENDS,
               instructions: Path | None = None) -> ChunkManifest:
    """Convert; `out` appears only when every artifact and the manifest are written."""
    src, out = Path(checkpoint_dir), Path(out)
    ck = read_act_checkpoint(src)
    s = ck.shape
    check_robot(joint_names, s.state_dim, s.action_dim, gripper, out)
    table = read_instructions(instructions, s.env_dim)
    args = tuple(torch.zeros(1, 3, *s.image_hw) for _ in ck.cameras) + (torch.zeros(1, s.state_dim),)
    names = [*ck.cameras, "state"]
    if s.env_dim:
        args, names = args + (torch.zeros(1, s.env_dim),), names + ["environment_state"]
    with new_bundle_dir(out) as tmp:
        try:
            model = ActInference(ck.weights, s).eval()
        except KeyError as exc:
            raise CheckpointError(f"{src / 'model.safetensors'} has no tensor {exc}; expected the weights of the "
                                  "ACT that config.json describes") from exc
        artifacts = {}
        with torch.no_grad():
            for backend in backends:
                file = f"policy.{SUFFIX_OF[backend]}"
                if backend == "executorch":
                    export_pte(act_export_form(model, xnnpack=True), args, tmp / file)
                else:  # MNN converts from ONNX; the .onnx stays, for onnxruntime in `bench runtime`
                    export_onnx(act_export_form(model, xnnpack=False), args, names, ["actions"], tmp / "policy.onnx")
                    convert_mnn(tmp / "policy.onnx", tmp / file)
                    artifacts["onnx"] = artifact_spec(tmp, "policy.onnx").model_dump()
                artifacts[backend] = artifact_spec(tmp, file).model_dump()
        manifest = build_manifest(ck, joint_names, rate_hz, gripper, artifacts, src.resolve(), table)
        write_json_atomic(tmp / "manifest.json", manifest.model_dump(mode="json"))
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla import", description="Import a policy trained elsewhere as a bundle.")
    p.add_argument("source", choices=["lerobot"], help="where the checkpoint comes from")
    p.add_argument("checkpoint", type=Path, help="LeRobot pretrained_model directory (config.json, model.safetensors, processors)")
    p.add_argument("--out", type=Path, required=True, help="new bundle directory")
    p.add_argument("--joint-names", required=True, help="comma-separated, in the state/action vector's order")
    p.add_argument("--rate-hz", type=float, required=True, help="control rate the policy was trained at (dataset fps)")
    p.add_argument("--gripper", default=None, help="the joint name that is the gripper (units m), if any")
    p.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated subset of {','.join(BACKENDS)}")
    p.add_argument("--instructions", type=Path, default=None,
                   help="JSON {names, table: {instruction: vector}} for a policy conditioned on environment_state")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="SmolVLA / pi0: the tokenizer.json (default: from vlm_model_name's or the preprocessor's "
                        "tokenizer_name directory, or the HF cache)")
    p.add_argument("--quantize", choices=["int8"], default=None,
                   help="SmolVLA, pi0, pi0.5: int8 variants of every stage (the parity against fp32 goes into the "
                        "manifest)")
    p.add_argument("--delegate", choices=DELEGATES, default="xnnpack",
                   help="SmolVLA, pi0, pi0.5: what the ExecuTorch programs are lowered to (openvino: `make "
                        "setup-openvino` first; the runtime configures its precision and threads on load)")
    a = p.parse_args(argv)
    backends = tuple(b for b in a.backends.split(",") if b)
    bad = [b for b in backends if b not in BACKENDS]
    if bad or not backends or a.rate_hz <= 0:
        p.error(f"--backends {a.backends!r} / --rate-hz {a.rate_hz}: expected a subset of {','.join(BACKENDS)} "
                "and a positive rate")
    joints = [n for n in a.joint_names.split(",") if n]
    try:
        kind = checkpoint_kind(a.checkpoint)
        if kind != "act" and a.instructions:
            raise CheckpointError(f"--instructions applies to ACT checkpoints (SmolVLA, pi0 and pi0.5 read the "
                                  f"instruction with their tokenizer); this one is {kind}")
        if kind == "smolvla":
            m = import_smolvla(a.checkpoint, a.out, joints, a.rate_hz, a.gripper, backends, a.tokenizer, a.quantize,
                               a.delegate)
        elif kind in ("pi0", "pi05"):
            m = import_pi0(a.checkpoint, a.out, joints, a.rate_hz, a.gripper, backends, a.tokenizer, a.quantize,
                           a.delegate)
        elif a.delegate != "xnnpack":
            raise CheckpointError(f"--delegate applies to SmolVLA, pi0 and pi0.5 checkpoints; this one is {kind}")
        elif a.quantize:
            raise CheckpointError(f"--quantize applies to SmolVLA, pi0 and pi0.5 checkpoints; this one is {kind}")
        elif a.tokenizer:
            raise CheckpointError("--tokenizer applies to SmolVLA and pi0 checkpoints; this one is an ACT")
        else:
            m = import_act(a.checkpoint, a.out, joints, a.rate_hz, a.gripper, backends, a.instructions)
    except CheckpointError as exc:
        print(f"omni-vla import: {exc}", file=sys.stderr)
        return 2
    print(f"bundle {a.out}: {m.policy}, cameras {[c.name for c in m.cameras]}, chunk {m.action.chunk_length} x "
          f"{len(m.action.joint_names)}, backends {sorted(next(iter(m.stages.values())).artifacts)}"
          + (f", parity vs fp32 eager {m.source['parity_db']} dB" if "parity_db" in m.source else ""))
    return 0


def checkpoint_kind(directory: Path) -> str:
    """config.json's policy type; one this importer cannot convert is refused naming the ones it can."""
    kind = read_json(Path(directory) / "config.json").get("type")
    if kind not in KINDS:
        raise CheckpointError(f"{Path(directory) / 'config.json'}: policy type {kind!r} cannot be imported; expected "
                              f"one of {', '.join(KINDS)}")
    return kind


if __name__ == "__main__":
    sys.exit(main())
