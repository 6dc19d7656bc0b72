"""SmolVLA's stages -> ONNX, ExecuTorch (XNNPACK .pte) and MNN, static shapes, one directory per model.

    python -m omni_vla_policies.vla.export_vla OUT_DIR --size full [--weights model.safetensors] [--backends ...]

Weights: LeRobot's SmolVLAPolicy state_dict (tests/support/smolvla_reference.py writes one), or a seeded random
init when none is given (latency does not depend on what the weights learned). Writes OUT_DIR/<stage>.{onnx,pte,
mnn}, OUT_DIR/arch.json and OUT_DIR/export.json (sizes, export seconds). ONNX files over 2 GB would need external
data; no stage of the published size comes near (the prefix stage is the largest, ~0.8 GB).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from omni_vla.backends import ARTIFACT_FORMATS
from omni_vla_policies.converters import DELEGATES, convert_mnn, executorch_partitioners, export_onnx, export_pte, versions
from omni_vla_policies.vla.model import STAGE_IO, SmolVLA, load_lerobot_weights
from omni_vla_policies.vla.stages import stage_inputs, stage_modules
from omni_vla_policies.vla.smolvla_config import SIZES, SmolVLAArch



def build(arch: SmolVLAArch, weights: Path | None = None, seed: int = 0) -> SmolVLA:
    """The model with LeRobot's weights from `weights`, or seeded random ones."""
    torch.manual_seed(seed)
    model = SmolVLA(arch).eval()
    if weights is not None:
        load_lerobot_weights(model, weights)
    return model


def stage_flops(model: torch.nn.Module) -> dict[str, int]:
    """Floating-point operations of one call of each stage (torch's FlopCounterMode on the float modules and their
    example inputs): what `omni-vla bench runtime --stages` divides a stage's measured time by."""
    mods, ins = stage_modules(model), stage_inputs(model)
    out = {}
    with torch.no_grad():
        for name, mod in mods.items():
            with FlopCounterMode(display=False) as fc:
                mod(*ins[name])
            out[name] = int(fc.get_total_flops())
    return out


def export_int8(module: torch.nn.Module, args: tuple, name: str, out: Path, backend: str) -> Path:
    """The int8 ONNX/MNN variant: onnxruntime's dynamic quantisation (int8 weights, activations quantised per call)
    of the float ONNX, or MNN's int8 weight-only conversion (--weightQuantBits 8) of it."""
    in_names, out_names = STAGE_IO[name]
    fp32 = out / f"{name}.fp32.onnx"
    if not fp32.is_file():
        export_onnx(module, args, in_names, out_names, fp32)
    if backend == "onnx":
        from onnxruntime.quantization import QuantType, quantize_dynamic  # optional: extra "export", int8 variant only

        quantize_dynamic(str(fp32), str(out / f"{name}.onnx"), weight_type=QuantType.QInt8)
        return out / f"{name}.onnx"
    convert_mnn(fp32, out / f"{name}.mnn", ["--weightQuantBits", "8"])
    return out / f"{name}.mnn"


def int8_dynamic(model: SmolVLA, in_place: bool = False) -> SmolVLA:
    """A copy (or, `in_place`, the model itself) with every nn.Linear as int8 weights (per output channel) and int8
    activations quantised per call (torchao), the form XNNPACK runs as dynamically quantised GEMMs."""
    from torchao.quantization.granularity import PerAxis  # optional: extra "export", int8 variant only
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_  # optional: extra "export", int8 variant only

    q = model if in_place else copy.deepcopy(model)
    quantize_(q, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)))
    return q.eval()


def export_stages(model: SmolVLA, out: Path, backends: tuple[str, ...] = ARTIFACT_FORMATS, stages: tuple[str, ...] | None = None,
                  log=print, int8: bool = False, delegate: str = "xnnpack", in_place: bool = False) -> dict:  # noqa: ANN001
    """Each stage to each backend (int8: the quantised onnx/mnn variants); returns {stage: {backend: {"bytes",
    "export_s"}}}. `in_place` with int8: the model itself is quantised for ExecuTorch, after every other backend's
    artifacts are written from its float weights (a 3.3 B pi0 cannot hold a float and a quantised copy at once)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "arch.json").write_text(model.arch.model_dump_json(indent=1))
    flops = stage_flops(model)  # before any in-place quantisation
    mods, ins = stage_modules(model), stage_inputs(model)
    qmods: dict = {}
    report: dict = {name: {} for name in stages or tuple(mods)}
    for backend in sorted(backends, key=lambda b: b == "executorch"):  # ExecuTorch last: it may quantise in place
        for name in report:
            in_names, out_names = STAGE_IO[name]
            with torch.no_grad():
                t0 = time.perf_counter()
                if int8 and backend == "executorch":
                    qmods = qmods or stage_modules(int8_dynamic(model, in_place))
                    path = out / f"{name}.pte"
                    export_pte(qmods[name], ins[name], path)
                elif int8:
                    path = export_int8(mods[name], ins[name], name, out, backend)
                elif backend == "onnx":
                    path = out / f"{name}.onnx"
                    export_onnx(mods[name], ins[name], in_names, out_names, path)
                elif backend == "executorch":
                    path = out / f"{name}.pte"
                    export_pte(mods[name], ins[name], path, delegate=delegate)
                else:
                    path = out / f"{name}.mnn"
                    if not (out / f"{name}.onnx").is_file():
                        export_onnx(mods[name], ins[name], in_names, out_names, out / f"{name}.onnx")
                    convert_mnn(out / f"{name}.onnx", path)
                report[name][backend] = {"bytes": path.stat().st_size, "export_s": round(time.perf_counter() - t0, 1)}
                log(f"{name}.{backend}: {path.stat().st_size / 1e6:.1f} MB in {report[name][backend]['export_s']} s")
    for fp32 in out.glob("*.fp32.onnx"):
        fp32.unlink()
    earlier = json.loads((out / "export.json").read_text()) if (out / "export.json").is_file() else {}
    if earlier.get("int8") == int8:  # re-exporting some stages (e.g. finish at the robot's width) keeps the rest
        report = {**earlier.get("stages", {}), **report}
    (out / "export.json").write_text(json.dumps({"stages": report, "int8": int8, "flops": flops,
                                                 "versions": versions()}, indent=1))
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--size", choices=sorted(SIZES), default="full")
    p.add_argument("--weights", type=Path, default=None, help="LeRobot SmolVLAPolicy model.safetensors")
    p.add_argument("--backends", default=",".join(ARTIFACT_FORMATS))
    p.add_argument("--stages", default="vision,prefix,step,finish")
    p.add_argument("--state-dim", type=int, default=None, help="the robot's state width (default: the size's)")
    p.add_argument("--action-dim", type=int, default=None, help="the robot's action width, what finish keeps")
    p.add_argument("--delegate", choices=DELEGATES, default="xnnpack", help="ExecuTorch's delegate (openvino: "
                   "policies/vla/openvino_delegate.py)")
    p.add_argument("--int8", action="store_true", help="the int8 variant: onnxruntime and ExecuTorch dynamic "
                   "(int8 weights and activations), MNN weight-only")
    args = p.parse_args(argv)
    backends = tuple(b for b in args.backends.split(",") if b)
    if bad := [b for b in backends if b not in ARTIFACT_FORMATS]:
        print(f"unknown backend(s) {bad}: expected some of {list(ARTIFACT_FORMATS)}", file=sys.stderr)
        return 2
    if args.delegate != "xnnpack" and (args.int8 or backends != ("executorch",)):
        print(f"--delegate {args.delegate}: expected --backends executorch and no --int8", file=sys.stderr)
        return 2
    try:
        executorch_partitioners(args.delegate)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.weights is not None and not args.weights.is_file():
        print(f"--weights {args.weights} is not a file: expected a LeRobot SmolVLA model.safetensors", file=sys.stderr)
        return 2
    arch = SIZES[args.size]()
    dims = {k: v for k, v in (("state_dim", args.state_dim), ("action_dim", args.action_dim)) if v is not None}
    if any(not 1 <= v <= arch.max_state_dim for v in dims.values()):
        print(f"--state-dim/--action-dim {dims}: expected 1..{arch.max_state_dim} (the padded width)", file=sys.stderr)
        return 2
    model = build(arch.model_copy(update=dims), args.weights)
    export_stages(model, args.out, backends, tuple(args.stages.split(",")), log=lambda s: print(s, file=sys.stderr),
                  int8=args.int8, delegate=args.delegate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
