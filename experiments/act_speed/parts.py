"""Where the imported ACT's time goes, per part and per runtime: the ResNet trunk (both cameras, one batched pass,
with the 1x1 input projection), the transformer (tokens -> chunk) and the whole network, each exported on its own
and timed in one interleaved run (eager PyTorch, onnxruntime, ExecuTorch/XNNPACK, MNN), plus what the ExecuTorch
program leaves outside XNNPACK.

    python experiments/act_speed/parts.py CHECKPOINT_DIR --threads 1 --reps 100 --form reference|export --json OUT

`--form reference` exports ActInference as it is; `--form export` the export form the importer writes
(act_model.act_export_form: its XNNPACK form for ExecuTorch, its ONNX form for onnxruntime and MNN); eager PyTorch is always
the reference ActInference. One thread count per process: ExecuTorch's thread pool is process-wide.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from omni_vla.runtime.mnn import import_mnn
from omni_vla_policies.act_model import ActInference, act_export_form
from omni_vla_policies.converters import convert_mnn, export_onnx, export_pte
from omni_vla_policies.lerobot_checkpoint import read_act_checkpoint


class Trunk(nn.Module):
    """Both cameras through the shared ResNet and the 1x1 projection: [cameras, 3, H, W] -> [cameras, D, h, w], or
    as tokens [cameras*h*w, D] (`as_tokens`: the reference made comparable with the export form's trunk)."""

    def __init__(self, model: nn.Module, as_tokens: bool = False) -> None:
        super().__init__()
        self.m, self.as_tokens = model, as_tokens

    def forward(self, images: Tensor) -> Tensor:
        f = self.m.trunk(images)
        return f.flatten(2).permute(0, 2, 1).reshape(-1, f.shape[1]) if self.as_tokens else f


class Transformer(nn.Module):
    """Everything after the trunk: (trunk features, state[, env]) -> chunk. `map_shape` (cameras, h, w): the
    features come as the export form's image tokens [cameras*h*w, D] and `model` is the reference ActInference."""

    def __init__(self, model: nn.Module, map_shape: tuple[int, int, int] | None = None) -> None:
        super().__init__()
        self.m, self.map_shape = model, map_shape

    def forward(self, feats: Tensor, *rest: Tensor) -> Tensor:
        if self.map_shape is not None:
            feats = feats.reshape(*self.map_shape, feats.shape[-1]).permute(0, 3, 1, 2)
        return self.m.head_from_features(feats, *rest)


def pte_outside_xnnpack(path: Path) -> dict:
    """Delegate calls and the portable kernels left outside XNNPACK, read from the serialised program."""
    from executorch.exir._serialize._program import deserialize_pte_binary  # optional: analysis only

    prog = deserialize_pte_binary(path.read_bytes())
    prog = getattr(prog, "program", prog)
    plan = prog.execution_plan[0]
    names = [o.name + ("." + o.overload if o.overload else "") for o in plan.operators]
    kernels: Counter = Counter()
    delegates = 0
    for chain in plan.chains:
        for ins in chain.instructions:
            kind = type(ins.instr_args).__name__
            if kind == "KernelCall":
                kernels[names[ins.instr_args.op_index]] += 1
            elif kind == "DelegateCall":
                delegates += 1
    return {"delegate_calls": delegates, "portable_kernels": dict(kernels)}


def interleaved(calls: dict[str, Callable[[], object]], reps: int, warmup: int, gap_s: float = 0.0) -> dict[str, list[float]]:
    """ms per call of each callable, round-robin from a rotating start (no backend always follows the same one);
    `gap_s` before each call lets a spinning thread pool go to sleep first."""
    for fn in calls.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in calls}
    order = list(calls)
    for rep in range(reps):
        for key in order[rep % len(order):] + order[:rep % len(order)]:
            if gap_s:
                time.sleep(gap_s)
            t0 = time.perf_counter()
            calls[key]()
            times[key].append((time.perf_counter() - t0) * 1e3)
    return times


def emit(out: dict, path: Path | None) -> None:
    """Print the result and write it where --json says."""
    text = json.dumps(out, indent=1)
    print(text)
    if path:
        path.write_text(text + "\n")


def load(checkpoint: Path, threads: int) -> tuple:
    """Threads for torch and for ExecuTorch's process-wide pool, then the checkpoint and its eager network."""
    torch.set_num_threads(threads)
    from executorch.extension.pybindings import portable_lib  # optional: analysis only
    portable_lib._unsafe_reset_threadpool(threads)
    ck = read_act_checkpoint(checkpoint)
    return ck, ActInference(ck.weights, ck.shape).eval()


def runners(forms: dict[str, nn.Module], args: tuple[Tensor, ...], d: Path, name: str, threads: int) -> tuple[dict, dict]:
    """forms: "torch" (the eager reference), "executorch" and "onnx" (what each exporter is given)."""
    import onnxruntime as ort  # optional: analysis only
    from executorch.runtime import Runtime  # optional: analysis only

    names = [f"in{i}" for i in range(len(args))]
    pte, onnx, mnn = d / f"{name}.pte", d / f"{name}.onnx", d / f"{name}.mnn"
    with torch.no_grad():
        export_pte(forms["executorch"], args, pte)
        export_onnx(forms["onnx"], args, names, ["out"], onnx)
    convert_mnn(onnx, mnn)
    info = {"pte": pte_outside_xnnpack(pte), "pte_bytes": pte.stat().st_size, "mnn_bytes": mnn.stat().st_size}
    np_args = [a.numpy().copy() for a in args]
    t_args = [torch.from_numpy(a) for a in np_args]

    module = forms["torch"]

    def run_torch() -> None:
        with torch.no_grad():
            module(*t_args)

    program = Runtime.get().load_program(str(pte))
    method = program.load_method("forward")

    def run_et() -> None:
        _ = program
        method._method(t_args, clone_outputs=False)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(str(onnx), opts, providers=["CPUExecutionProvider"])
    feed = dict(zip(names, np_args))

    def run_ort() -> None:
        sess.run(None, feed)

    MNN = import_mnn()
    rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": threads},))
    mod = MNN.nn.load_module_from_file(str(mnn), names, ["out"], runtime_manager=rt, shape_mutable=False)
    holders = [MNN.expr.placeholder(list(a.shape), MNN.expr.NCHW, MNN.expr.dtype.float) for a in np_args]

    def run_mnn() -> None:
        for h, a in zip(holders, np_args):
            h.write(a)
        mod.forward(holders)[0].read()

    ref = module(*t_args).detach().numpy()
    for h, a in zip(holders, np_args):
        h.write(a)
    got = {"executorch": method._method(t_args, clone_outputs=True)[0].numpy(),
           "onnxruntime": sess.run(None, feed)[0], "mnn": np.array(mod.forward(holders)[0].read())}
    info["max_abs_vs_torch"] = {k: float(np.abs(v.reshape(ref.shape) - ref).max()) for k, v in got.items()}
    return {"torch": run_torch, "onnxruntime": run_ort, "executorch": run_et, "mnn": run_mnn}, info


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--form", choices=["reference", "export"], default="reference")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    ck, model = load(a.checkpoint, a.threads)
    s = ck.shape
    models = {"torch": model, "executorch": model, "onnx": model}
    if a.form == "export":
        models.update(executorch=act_export_form(model, xnnpack=True), onnx=act_export_form(model, xnnpack=False))
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.normal(0, 1, (s.cameras, 3, *s.image_hw)).astype(np.float32))
    rest = (torch.from_numpy(rng.normal(0, 1, (1, s.state_dim)).astype(np.float32)),)
    if s.env_dim:
        rest += (torch.from_numpy(rng.normal(0, 1, (1, s.env_dim)).astype(np.float32)),)
    with torch.no_grad():
        feats = models["onnx"].trunk(images)
        fmap = model.trunk(images).shape
    tokens_in = a.form == "export"
    parts = {"trunk": ({k: Trunk(m, tokens_in and k == "torch").eval() for k, m in models.items()}, (images,)),
             "transformer": ({k: Transformer(m, (fmap[0], fmap[2], fmap[3]) if tokens_in and k == "torch" else None).eval()
                              for k, m in models.items()}, (feats,) + rest),
             "full": (models, tuple(images[i:i + 1].contiguous() for i in range(s.cameras)) + rest)}
    calls, info = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for part, (forms, args) in parts.items():
            r, info[part] = runners(forms, args, Path(tmp), part, a.threads)
            for backend, fn in r.items():
                calls[f"{part}/{backend}"] = fn
        times = interleaved(calls, a.reps, a.warmup)
    med = {k: round(float(np.median(v)), 3) for k, v in times.items()}
    out = {"form": a.form, "threads": a.threads, "reps": a.reps, "loadavg": os.getloadavg(),
           "median_ms": med, "p99_ms": {k: round(float(np.percentile(v, 99)), 3) for k, v in times.items()},
           "parts": info}
    emit(out, a.json)


if __name__ == "__main__":
    main()
