"""A/B in one process: two bundles, interleaved in alternating order, 1 thread, median and p99 per runtime.

usage: python bundle_ab.py BUNDLE_A BUNDLE_B REPS {prefix|infer} [backend ...]
`prefix` times the prefix stage alone, `infer` the whole inference (prefix + flow head).
prefix_fold_ab.json came from this with `prefix` (A = unfolded, B = folded prefix; its labels say so),
cross_fold_ab.json with `infer` and torch-folded added (A = v1 = shipped, B = v2 = cross-folded).
"""
import json, sys, time
from pathlib import Path
import numpy as np
from omni_vla_policies.bench_runtime import make_runtime, fixed_inputs, _call

a, b, reps, what = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
backends = sys.argv[5:] or ["executorch", "mnn", "onnxruntime"]
out = {}
for backend in backends:
    rts = {"a": make_runtime(backend, a, 1), "b": make_runtime(backend, b, 1)}
    x = fixed_inputs(a)
    for rt in rts.values():
        _call(rt, x, 0)
    t = {k: [] for k in rts}
    for i in range(reps):
        for k in (list(rts) if i % 2 else list(rts)[::-1]):
            t0 = time.perf_counter()
            rts[k].run_prefix() if what == "prefix" else _call(rts[k], x, i % 5)
            t[k].append((time.perf_counter() - t0) * 1e3)
    out[backend] = {k: {"median_ms": round(float(np.median(v)), 4), "p99_ms": round(float(np.percentile(v, 99)), 4)} for k, v in t.items()}
    out[backend]["speedup_b_over_a"] = round(out[backend]["a"]["median_ms"] / out[backend]["b"]["median_ms"], 3)
print(json.dumps({"threads": 1, "reps": reps, "measure": what, "bundle_a": str(a), "bundle_b": str(b), **out}, indent=1))
