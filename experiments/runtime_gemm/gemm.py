"""One float32 Linear at the GEMM shapes of SmolVLA's stages, on each runtime, interleaved call by call.

    python experiments/runtime_gemm/gemm.py OUT_DIR [--threads 1] [--reps 30] > gemm.json

Locates what limits the stage figures of results/vla/: if a runtime is behind onnxruntime on one GEMM of a stage's
shape, the stage cannot catch up by changing the graph around it. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from omni_vla_policies.converters import convert_mnn, export_onnx, export_pte
from omni_vla.runtime.mnn import import_mnn
from omni_vla_policies.vla.runners import _stdout_silenced

# (stage, what, M rows, K in, N out): SigLIP at 512 px (1024 patches, 768 wide, MLP 3072), the SmolLM2 prefix
# (177 tokens, 960 wide, MLP 2560), the action expert (50 rows, 720 wide, MLP 2048).
SHAPES = [("vision", "mlp_up", 1024, 768, 3072), ("vision", "qkv", 1024, 768, 768),
          ("prefix", "mlp_up", 177, 960, 2560), ("prefix", "q", 177, 960, 960),
          ("step", "mlp_up", 50, 720, 2048), ("step", "q", 50, 720, 960)]


def export_pte_openvino(module: torch.nn.Module, args: tuple, path: Path) -> None:
    from executorch.backends.openvino.partitioner import OpenvinoPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    ep = torch.export.export(module, args, strict=False)
    prog = to_edge_transform_and_lower(ep, partitioner=[OpenvinoPartitioner([CompileSpec("device", b"CPU")])])
    path.write_bytes(prog.to_executorch().buffer)


def runners(path: Path, lin: torch.nn.Linear, x: np.ndarray, threads: int) -> dict:
    import onnxruntime as ort
    from executorch.runtime import Runtime

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(path / "m.onnx"), opts, providers=["CPUExecutionProvider"])
    prog = Runtime.get().load_program(str(path / "m.pte"))
    meth = prog.load_method("forward")
    MNN = import_mnn()  # noqa: N806
    with _stdout_silenced():
        rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": threads},))
        mod = MNN.nn.load_module_from_file(str(path / "m.mnn"), ["x"], ["y"], runtime_manager=rt, shape_mutable=False)
    hold = MNN.expr.placeholder(list(x.shape), MNN.expr.NCHW, MNN.expr.dtype.float)
    tx = torch.from_numpy(x)

    def mnn_run() -> np.ndarray:
        hold.write(x)
        return np.array(mod.forward([hold])[0].read())

    def torch_run() -> np.ndarray:
        with torch.inference_mode():
            return lin(tx).numpy()

    out = {}
    if (path / "m_ov.pte").is_file():
        prog_ov = Runtime.get().load_program(str(path / "m_ov.pte"))
        meth_ov = prog_ov.load_method("forward")
        out = {"executorch_openvino": lambda: meth_ov.execute([tx])[0].numpy(), "_keep_ov": prog_ov}
    return out | {"torch": torch_run, "onnxruntime": lambda: sess.run(None, {"x": x})[0],
            "executorch": lambda: meth.execute([tx])[0].numpy(), "mnn": mnn_run, "_keep": prog}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--openvino", action="store_true", help="also ExecuTorch with its OpenVINO delegate")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    for stage, what, m, k, n in SHAPES:
        d = a.out / f"{stage}_{what}"
        d.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        lin = torch.nn.Linear(k, n).eval()
        x = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
        args = (torch.from_numpy(x),)
        with _stdout_silenced():
            if not (d / "m.mnn").is_file():
                export_pte(lin, args, d / "m.pte")
                export_onnx(lin, args, ["x"], ["y"], d / "m.onnx")
                convert_mnn(d / "m.onnx", d / "m.mnn")
            if a.openvino and not (d / "m_ov.pte").is_file():
                export_pte_openvino(lin, args, d / "m_ov.pte")
        run = runners(d, lin, x, a.threads)
        names = [b for b in run if not b.startswith("_")]
        want = run["torch"]()
        times = {b: [] for b in names}
        err = {b: float(np.abs(run[b]() - want).max()) for b in names}
        for _ in range(a.reps):
            for b in names:
                t = time.perf_counter()
                run[b]()
                times[b].append(time.perf_counter() - t)
        flop = 2.0 * m * k * n
        med = {b: float(np.median(v)) for b, v in times.items()}
        rows.append({"stage": stage, "gemm": what, "m": m, "k": k, "n": n,
                     "median_ms": {b: round(1e3 * v, 3) for b, v in med.items()},
                     "p99_ms": {b: round(1e3 * float(np.percentile(v, 99)), 3) for b, v in times.items()},
                     "gflops": {b: round(flop / v / 1e9, 1) for b, v in med.items()},
                     "vs_onnxruntime": {b: round(med["onnxruntime"] / v, 3) for b, v in med.items()},
                     "max_abs_vs_torch": err})
    print(json.dumps({"threads": a.threads, "reps": a.reps, "load_average": os.getloadavg(), "shapes": rows}, indent=1))


if __name__ == "__main__":
    main()
