"""A/B in one process: prefix stage of two bundles (unfolded vs folded export), interleaved."""
import json, sys, time
from pathlib import Path
import numpy as np
from omni_vla_policies.bench_runtime import make_runtime, fixed_inputs, _call
old, new, reps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
out = {}
for backend in ("executorch", "mnn", "onnxruntime"):
    rts = {"unfolded": make_runtime(backend, old, 1), "folded": make_runtime(backend, new, 1)}
    x = fixed_inputs(old)
    for rt in rts.values():
        _call(rt, x, 0)
    t = {k: [] for k in rts}
    for i in range(reps):
        for k in (list(rts) if i % 2 else list(rts)[::-1]):
            t0 = time.perf_counter(); rts[k].run_prefix(); t[k].append((time.perf_counter() - t0) * 1e3)
    out[backend] = {k: {"median_ms": round(float(np.median(v)), 4), "p99_ms": round(float(np.percentile(v, 99)), 4)} for k, v in t.items()}
    out[backend]["speedup"] = round(out[backend]["unfolded"]["median_ms"] / out[backend]["folded"]["median_ms"], 3)
print(json.dumps({"threads": 1, "reps": reps, "stage": "prefix", "unfolded_bundle": str(old), "folded_bundle": str(new), **out}, indent=1))
