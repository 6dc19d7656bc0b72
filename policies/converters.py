"""Module -> backend artifact: ExecuTorch .pte (XNNPACK, or the OpenVINO delegate), ONNX, and ONNX -> MNN; shared by the policy
export (export.py) and the text-encoder export (text_encoder.py).

MNN conversion goes through the converter module that the MNN wheel ships (`_tools`), never the
`mnnconvert` console script (it phones home and pip-installs a protobuf downgrade at run time).
"""
from __future__ import annotations

import contextlib
import copy
import io
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import Tensor, nn

import omni_vla
from omni_vla.backends import LIBRARY_OF
from omni_vla.runtime.bundle import installed_version
from omni_vla.runtime.openvino import ENV_DIR, openvino_dir
from omni_vla_policies import lowering_cache
from omni_vla_policies.lowering_cache import cache_dir, lowered, program_key


def _without_unused_buffers(module: nn.Module, args: tuple[Tensor, ...]) -> nn.Module:
    """A copy of `module` without the buffers its forward never reads (ExecuTorch would store them all:
    each flow program holds the whole folded head, and init/finish use a few of its tensors). The copy shares the
    original's tensors: a stage that reaches a 13 GB model must not hold it twice while exporting."""
    ep = torch.export.export(module, args, strict=False)
    unused = {n.name for n in ep.graph.nodes if n.op == "placeholder" and not n.users}
    targets = [s.target for s in ep.graph_signature.input_specs if s.arg.name in unused and s.target is not None]
    if not targets:
        return module
    shared = {id(t): t for t in (*module.parameters(), *module.buffers())}
    module = copy.deepcopy(module, shared)  # new module objects around the same tensors: no second copy of the weights
    for target in targets:
        owner, _, name = target.rpartition(".")
        delattr(module.get_submodule(owner), name)
    return module


class HalfCompute(nn.Module):
    """float32 in and out, float16 inside: the runtimes and the manifest's tensor contract stay as they are."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.inner = copy.deepcopy(module).half()

    def forward(self, *args: Tensor) -> Tensor | tuple[Tensor, ...]:
        out = self.inner(*(a.half() for a in args))
        return tuple(o.float() for o in out) if isinstance(out, tuple) else out.float()


DELEGATES = ("xnnpack", "openvino")


def executorch_partitioners(delegate: str) -> list[object]:
    """XNNPACK (the default), or ExecuTorch's OpenVINO delegate with XNNPACK after it for what it leaves (it keeps
    upsample_bilinear2d from decomposition, then does not take it: a non-square camera's resize). Its export needs
    openvino 2025.x and nncf, its runtime the libraries omni_vla/runtime/openvino.py configures."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # optional: exir loads for seconds; only when a .pte is written

    if delegate == "xnnpack":
        return [XnnpackPartitioner()]
    if delegate != "openvino":
        raise ValueError(f"delegate must be one of {list(DELEGATES)}, not {delegate!r}")
    py = str(openvino_dir() / "py")  # `make setup-openvino` installs openvino and nncf there, beside the venv
    if Path(py).is_dir() and py not in sys.path:
        sys.path.append(py)
    try:
        from executorch.backends.openvino.partitioner import OpenvinoPartitioner  # optional: only for the OpenVINO delegate
        from executorch.exir.backend.compile_spec_schema import CompileSpec  # optional: only for the OpenVINO delegate
    except ImportError as exc:
        raise RuntimeError(f"the OpenVINO delegate cannot export here ({exc}); expected openvino 2025.x and nncf "
                           f"importable from {py}: run `make setup-openvino` (or set {ENV_DIR})") from exc
    return [OpenvinoPartitioner([CompileSpec("device", b"CPU")]), XnnpackPartitioner()]


def export_pte(module: nn.Module, args: tuple[Tensor, ...], path: Path, compute_dtype: str = "float32",
               delegate: str = "xnnpack") -> None:
    from executorch.exir import to_edge_transform_and_lower  # optional: exir loads for seconds; only when a .pte is written

    if compute_dtype not in ("float32", "float16"):
        raise ValueError(f"compute_dtype must be float32 or float16, not {compute_dtype!r}")
    partitioners = executorch_partitioners(delegate)
    def compute(m: nn.Module) -> nn.Module:
        return HalfCompute(m).eval() if compute_dtype == "float16" else m

    try:
        ep = torch.export.export(compute(_without_unused_buffers(module, args)), args, strict=False)
    except AttributeError:  # forward names a buffer the graph never reads (e.g. unused by one form): keep them all
        ep = torch.export.export(compute(module), args, strict=False)
    key = program_key(ep, delegate, (Path(__file__), Path(lowering_cache.__file__))) if cache_dir() else None
    path.write_bytes(lowered(key, lambda: to_edge_transform_and_lower(ep, partitioner=partitioners).to_executorch().buffer))


def export_onnx(module: nn.Module, args: tuple[Tensor, ...], in_names: list[str], out_names: list[str], path: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(module, args, str(path), input_names=in_names, output_names=out_names,
                          dynamo=False, opset_version=17, do_constant_folding=True)


_MNNCONVERT = """import sys
import _tools
rc = _tools.mnnconvert(sys.argv[1:])
sys.exit(0 if rc in (0, None, True) else 1)
"""


def convert_mnn(onnx_path: Path, mnn_path: Path, extra: list[str] | None = None) -> None:
    """ONNX -> MNN with the wheel's converter module (no telemetry, no pip at run time), in a child process whose
    working directory is its own: the converter spills every weight to `.__convert_external_data.bin` in the working
    directory, reads it back and deletes it, so two conversions sharing a directory swap weights and still report
    success (measured: a parallel test run's text encoder came out at -1 dB)."""
    argv = ["mnnconvert", "-f", "ONNX", "--modelFile", str(Path(onnx_path).resolve()),
            "--MNNModel", str(Path(mnn_path).resolve()), "--bizCode", "omni_vla", *(extra or [])]
    with tempfile.TemporaryDirectory(prefix="mnnconvert-") as scratch:
        r = subprocess.run([sys.executable, "-c", _MNNCONVERT, *argv], cwd=scratch, capture_output=True, text=True)
    if r.returncode != 0 or not mnn_path.is_file() or mnn_path.stat().st_size == 0:
        tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"MNN conversion of {onnx_path} failed (exit {r.returncode}): {tail[0]}")


def versions() -> dict[str, str]:
    out = {"omni_vla": omni_vla.__version__, "python": sys.version.split()[0]}
    for dist in ("torch", *LIBRARY_OF.values(), "onnxruntime"):
        v = installed_version(dist)
        if v is not None:
            out[dist] = v
    return out
