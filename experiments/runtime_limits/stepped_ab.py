"""A/B in one process: the flow head unrolled in one program (bundle format 1) against the stepped programs.

usage: python stepped_ab.py OLD_FLOW_DIR BUNDLE REPS
OLD_FLOW_DIR holds flow.pte/flow.mnn/flow.onnx of the last format-1 bundle, e.g. from
`git show ddd2901:bundles/reference/flow.pte` (same weights as BUNDLE). Each repetition runs, in
alternating order, one full flow stage per variant on the same context/noise/prefix inputs, at 1 thread;
a torch eager inference of the training model runs before each timed call, as in `bench runtime`, so
caches are as cold as in the interleaved benchmark. Prints medians, p99 and the stepped/unrolled speedup.
"""
import json, sys, time
from pathlib import Path
import numpy as np

old, bundle, reps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
import torch
from executorch.runtime import Runtime
import onnxruntime as ort
from omni_vla.runtime.executorch import ExecuTorchRuntime
from omni_vla.runtime.mnn import MNNRuntime, import_mnn
from omni_vla_policies.bench_runtime import OnnxRuntimeRunner, fixed_inputs, _call
from omni_vla_policies.torch_runtime import TorchRuntime

torch.set_num_threads(1)
x = fixed_inputs(bundle)
rts = {"executorch": ExecuTorchRuntime(bundle, 1), "mnn": MNNRuntime(bundle, 1), "onnxruntime": OnnxRuntimeRunner(bundle, 1)}
eager = TorchRuntime(bundle, 1)
for rt in (*rts.values(), eager):
    _call(rt, x, 2)
ctx = np.zeros(rts["mnn"].manifest.stages["prefix"].outputs[0].shape, np.float32)
ctx[...] = rts["mnn"].run_stages(x["front"], x["wrist"], x["state"], x["instruction"], ctx, x["noise"], x["prefix"], 2)[0]
mask = (np.arange(x["prefix"].shape[1]) < 2).astype(np.float32).reshape(1, -1, 1)
flow_in = [ctx, x["state"], x["noise"], x["prefix"], mask]
t_in = [torch.from_numpy(a) for a in flow_in]
et_old = Runtime.get().load_program(str(old / "flow.pte"))
et_old_m = et_old.load_method("forward")
MNN = import_mnn()
mnn_rt = MNN.nn.create_runtime_manager(({"backend": "CPU", "precision": "high", "numThread": 1},))
names = ["context", "state", "noise", "prefix", "prefix_mask"]
mnn_old = MNN.nn.load_module_from_file(str(old / "flow.mnn"), names, ["actions"], runtime_manager=mnn_rt, shape_mutable=False)
mnn_vars = [MNN.expr.placeholder(list(a.shape), MNN.expr.NCHW, MNN.expr.dtype.float) for a in flow_in]
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
ort_old = ort.InferenceSession(str(old / "flow.onnx"), so, providers=["CPUExecutionProvider"])


def mnn_unrolled() -> np.ndarray:
    for v, a in zip(mnn_vars, flow_in):
        v.write(a)
    return mnn_old.forward(mnn_vars)[0].read()


variants = {
    "executorch": {"unrolled": lambda: et_old_m._method(t_in, clone_outputs=False)[0].numpy(),
                   "stepped": lambda: rts["executorch"]._flow(*t_in).numpy()},
    "mnn": {"unrolled": mnn_unrolled, "stepped": lambda: rts["mnn"]._flow(*flow_in)},
    "onnxruntime": {"unrolled": lambda: ort_old.run(None, dict(zip(names, flow_in)))[0],
                    "stepped": lambda: rts["onnxruntime"]._flow(*flow_in)},
}
out = {"threads": 1, "reps": reps, "measure": "flow stage (init + 10 steps + finish), after an eager inference"}
for backend, v in variants.items():
    diff = float(np.abs(np.asarray(v["unrolled"]()).reshape(-1) - np.asarray(v["stepped"]()).reshape(-1)).max())
    t = {k: [] for k in v}
    for i in range(reps):
        for k in (list(v) if i % 2 else list(v)[::-1]):
            _call(eager, x, 2)
            t0 = time.perf_counter()
            v[k]()
            t[k].append((time.perf_counter() - t0) * 1e3)
    out[backend] = {k: {"median_ms": round(float(np.median(s)), 4), "p99_ms": round(float(np.percentile(s, 99)), 4)} for k, s in t.items()}
    out[backend]["speedup_stepped_over_unrolled"] = round(out[backend]["unrolled"]["median_ms"] / out[backend]["stepped"]["median_ms"], 3)
    out[backend]["max_abs_difference"] = diff
print(json.dumps(out, indent=1))
