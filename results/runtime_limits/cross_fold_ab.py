"""A/B in one process: whole inference on two bundles of the same weights (flow_head.folded/1 vs /2),
interleaved in alternating order, 1 thread. Only the flow stage differs between the two bundles."""
import json, sys, time
from pathlib import Path
import numpy as np
from omni_vla_policies.bench_runtime import make_runtime, fixed_inputs, _call
old, new, reps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
out = {}
for backend in ("executorch", "mnn", "onnxruntime", "torch-folded"):
    rts = {"v1": make_runtime(backend, old, 1), "v2": make_runtime(backend, new, 1)}
    x = fixed_inputs(old)
    for rt in rts.values():
        _call(rt, x, 0)
    t = {k: [] for k in rts}
    for i in range(reps):
        for k in (list(rts) if i % 2 else list(rts)[::-1]):
            t0 = time.perf_counter(); _call(rts[k], x, i % 5); t[k].append((time.perf_counter() - t0) * 1e3)
    out[backend] = {k: {"median_ms": round(float(np.median(v)), 4), "p99_ms": round(float(np.percentile(v, 99)), 4)} for k, v in t.items()}
    out[backend]["speedup"] = round(out[backend]["v1"]["median_ms"] / out[backend]["v2"]["median_ms"], 3)
    for rt in rts.values():
        getattr(rt, "close", lambda: None)()
print(json.dumps({"threads": 1, "reps": reps, "measure": "whole inference (prefix + flow)", "v1_bundle": str(old), "v2_bundle": str(new), **out}, indent=1))
