"""Runtime benchmark: one full inference (prefix + N-step flow head) on PyTorch eager, onnxruntime,
ExecuTorch and MNN, same bundle and inputs, interleaved in one process, per thread count (a bundle on ExecuTorch's
OpenVINO delegate: one process per thread count, since OpenVINO is configured once per process).

`torch` is the training model as users run it (the baseline of speedup_vs_torch); `torch-folded` is
eager PyTorch on the folded stages the artifacts were exported from, so speedup_vs_torch_folded
says what the runtimes add beyond the graph rewrite.

    python -m omni_vla_policies.bench_runtime --bundle bundles/reference --threads 1,2 --reps 200 --json

Timing: after a warm-up, each repetition runs every backend once in a rotating order (so drift and
neighbours' load hit all equally); median and p99 in ms. Cold start (import + load + first inference)
and peak RSS are measured in a fresh subprocess per backend, since in-process the libraries are
already imported and the RSS is shared.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from omni_vla.backends import ALL_BACKENDS, EAGER, ROBOT_BACKENDS
from omni_vla.runtime.bundle import load_bundle, read_manifest
from omni_vla.runtime.registry import flow_runtime, openvino_delegated, read_any_manifest, sniff_kind
from omni_vla.runtime.flow import SteppedFlow
from omni_vla.tools.errors import choice_list, comma_list, existing_bundle, non_negative_int, positive_int
from omni_vla_policies.stdio import stdout_to_stderr

# Each runtime class is loaded by name (runtime/registry.py): the cold start of one backend is measured in a fresh
# process that must import that backend's libraries only (torch for torch, executorch for executorch, MNN for mnn).


class OnnxRuntimeRunner:
    """The bundle's ONNX stages on onnxruntime (baseline; not a robot backend), chained like every runtime."""

    backend = "onnxruntime"

    def __init__(self, bundle_dir: Path, num_threads: int = 1) -> None:
        import onnxruntime as ort  # optional: extra "export"; only this backend's cold start may load it

        self.manifest, paths = load_bundle(bundle_dir, "onnx", check_versions=False)
        so = ort.SessionOptions()
        so.intra_op_num_threads = num_threads
        so.inter_op_num_threads = 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.sess = {k: ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]) for k, p in paths.items()}
        self._names = {k: [t.name for t in self.manifest.stages[k].inputs] for k in paths}
        self._flow = SteppedFlow(self.manifest, self._call, lambda a: a, np.copyto)
        self.mask = np.zeros((1, self.manifest.horizon, 1), np.float32)
        self._prefix_in: dict[str, np.ndarray] = {}

    def _call(self, stage: str, inputs, fresh=None) -> list:  # noqa: ANN001
        return self.sess[stage].run(None, dict(zip(self._names[stage], inputs)))

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:  # noqa: ANN001
        self._prefix_in = {"front": images["front"], "wrist": images["wrist"], "state": state, "instruction": instruction}
        ctx = self.sess["prefix"].run(None, self._prefix_in)[0]
        self.mask.fill(0.0)
        self.mask[0, :prefix_len, 0] = 1.0
        np.copyto(out, self._flow(ctx, state, noise, prefix, self.mask)[0])

    def run_prefix(self) -> None:
        self.sess["prefix"].run(None, self._prefix_in)

    def close(self) -> None:
        self.sess.clear()


def make_runtime(backend: str, bundle_dir: Path, threads: int):  # noqa: ANN201
    if backend == "onnxruntime":
        return OnnxRuntimeRunner(bundle_dir, threads)
    if backend == "torch-folded":
        return flow_runtime(EAGER)(bundle_dir, threads, folded=True)
    if backend not in ALL_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {ALL_BACKENDS}")
    return flow_runtime(backend)(bundle_dir, threads)


def fixed_inputs(bundle_dir: Path, seed: int = 0) -> dict[str, np.ndarray]:
    m = read_manifest(bundle_dir)
    rng = np.random.default_rng(seed)
    s, h, d, e = m.image_size, m.horizon, m.action_dim, m.embedding_dim
    state = np.array(m.normalization.state_mean, np.float32)[None]
    instr = rng.standard_normal((1, e)).astype(np.float32)
    return {
        "front": rng.random((1, 3, s, s), dtype=np.float32), "wrist": rng.random((1, 3, s, s), dtype=np.float32),
        "state": state, "instruction": instr / np.linalg.norm(instr),
        "prefix": np.repeat(state[:, None, :], h, axis=1).astype(np.float32), "noise": rng.standard_normal((1, h, d), dtype=np.float32),
        "out": np.zeros((h, d), np.float32),
    }


def _call(rt, x: dict[str, np.ndarray], prefix_len: int) -> None:  # noqa: ANN001
    rt.infer({"front": x["front"], "wrist": x["wrist"]}, x["state"], x["instruction"], x["prefix"], prefix_len, x["noise"], x["out"])


def process_age_s() -> float:
    """Seconds since this process was started (Linux /proc, 10 ms resolution)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def cold_start(backend: str, bundle_dir: Path, threads: int, reps: int = 20) -> dict[str, float]:
    """In this (fresh) process: from process start (every import counted, wherever it sits) through load and
    the first inference, then peak RSS after `reps` more calls."""
    rt = make_runtime(backend, bundle_dir, threads)
    x = fixed_inputs(bundle_dir)
    _call(rt, x, 2)
    cold = process_age_s()
    for _ in range(reps):
        _call(rt, x, 2)
    return {"cold_start_s": round(cold, 3), "peak_rss_mb": round(peak_rss_kb() / 1024, 1)}


def peak_rss_kb() -> int:
    """VmHWM of this process (ru_maxrss would carry the forking parent's peak across exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def cold_start_subprocess(backend: str, bundle_dir: Path, threads: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "omni_vla_policies.bench_runtime", "--bundle", str(bundle_dir), "--cold-start", backend,
           "--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc={r.returncode}"}  # type: ignore[dict-item]
    return json.loads(r.stdout.strip().splitlines()[-1])


def stage_flops(bundle_dir: Path) -> dict[str, int]:
    """Floating-point operations of one inference per stage, counted on the eager model."""
    import torch  # optional: not in the other backends' cold-start processes
    from torch.utils.flop_counter import FlopCounterMode  # optional: not in the other backends' cold-start processes

    rt, x = make_runtime(EAGER, bundle_dir, 1), {k: torch.from_numpy(v) for k, v in fixed_inputs(bundle_dir).items()}
    out = {}
    with torch.inference_mode():
        with FlopCounterMode(display=False) as fc:
            ctx = rt.model.prefix_encoder(x["front"], x["wrist"], x["state"], x["instruction"])
        out["prefix"] = int(fc.get_total_flops())
        mask = torch.zeros(1, x["prefix"].shape[1], 1)
        with FlopCounterMode(display=False) as fc:
            rt.model.flow_head(ctx, x["state"], x["noise"], x["prefix"], mask)
        out["flow"] = int(fc.get_total_flops())
    return out


def sgemm_gflops(threads: int, n: int = 256, reps: int = 50) -> float:
    """What this CPU sustains on a dense float32 matmul at `threads` (torch/oneDNN): the roofline."""
    import torch  # optional: not in the other backends' cold-start processes

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(5):
        torch.mm(a, b)
    dt = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        dt.append(time.perf_counter() - t0)
    return round(2 * n**3 / float(np.median(dt)) / 1e9, 2)


def bench(bundle_dir: Path, threads: int, reps: int, warmup: int, backends: tuple[str, ...], cold: bool = True,
          stages: bool = False) -> dict:
    x = fixed_inputs(bundle_dir)
    rts = {b: make_runtime(b, bundle_dir, threads) for b in backends}
    times: dict[str, list[float]] = {b: [] for b in backends}
    prefix_times: dict[str, list[float]] = {b: [] for b in backends}
    order = list(backends)
    for i in range(warmup + reps):
        order = order[1:] + order[:1]
        for b in order:
            t0 = time.perf_counter()
            _call(rts[b], x, i % 3)
            dt = (time.perf_counter() - t0) * 1e3
            if stages:  # the same inputs again, prefix stage only: flow = full - prefix
                t1 = time.perf_counter()
                rts[b].run_prefix()
                prefix_times[b].append((time.perf_counter() - t1) * 1e3)
            if i >= warmup:
                times[b].append(dt)
    for rt in rts.values():
        rt.close()
    m = read_manifest(bundle_dir)
    res: dict = {"threads": threads, "reps": reps, "warmup": warmup,
                 "sizes": {"image": m.image_size, "horizon": m.horizon, "action_dim": m.action_dim, "num_steps": m.num_steps}}
    for b in backends:
        a = np.array(times[b])
        res[b] = {"median_ms": round(float(np.median(a)), 4), "p99_ms": round(float(np.percentile(a, 99)), 4),
                  "mean_ms": round(float(a.mean()), 4)}
        if b in ROBOT_BACKENDS:
            res[b]["compute_dtype"] = m.compute_dtype(b)
        if cold:
            res[b].update(cold_start_subprocess(b, bundle_dir, threads))
    for base in (EAGER, "torch-folded"):
        if base in res:
            for b in ALL_BACKENDS[ALL_BACKENDS.index(base) + 1:]:
                if b in res:
                    res[b][f"speedup_vs_{base.replace('-', '_')}"] = round(res[base]["median_ms"] / res[b]["median_ms"], 2)
    if stages:
        flops = stage_flops(bundle_dir)
        res["flops"] = {**flops, "total": sum(flops.values())}
        res["sgemm_gflops"] = sgemm_gflops(threads)
        for b in backends:
            pre = float(np.median(prefix_times[b][warmup:]))
            flow = res[b]["median_ms"] - pre
            res[b]["stages"] = {
                "prefix_ms": round(pre, 4), "flow_ms": round(flow, 4),
                "prefix_gflops": round(flops["prefix"] / pre / 1e6, 2), "flow_gflops": round(flops["flow"] / flow / 1e6, 2),
                "fraction_of_sgemm": round(res["flops"]["total"] / res[b]["median_ms"] / 1e6 / res["sgemm_gflops"], 3),
            }
    return res


def per_thread_process(argv: list[str], threads: list[int]) -> tuple[int, list]:
    """This benchmark once per thread count, each through the CLI in a child process (argparse keeps the last
    --threads), so a refusal there is the CLI's one line; the first non-zero exit code stops it."""
    results: list = []
    for n in threads:
        res = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", *argv, "--threads",
                              str(n), "--json"], stdout=subprocess.PIPE, text=True)
        if res.returncode != 0:
            return res.returncode, results
        results += json.loads(res.stdout)
    return 0, results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla bench runtime", description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=existing_bundle, required=True)
    p.add_argument("--threads", type=comma_list(positive_int), default=[1, 2], help="comma list of thread counts (an OpenVINO-delegated bundle: one process each)")
    p.add_argument("--reps", type=positive_int, default=200)
    p.add_argument("--warmup", type=non_negative_int, default=20)
    p.add_argument("--backends", type=choice_list(ALL_BACKENDS), default=list(ALL_BACKENDS), help="comma list")
    p.add_argument("--no-cold-start", action="store_true", help="skip the per-backend subprocess cold-start runs")
    p.add_argument("--stages", action="store_true",
                   help="also time each stage alone, with its GFLOP/s against the sgemm roofline of the same run")
    p.add_argument("--cold-start", metavar="BACKEND", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    threads = a.threads
    with stdout_to_stderr() as real:
        if a.cold_start:
            print(json.dumps(cold_start(a.cold_start, a.bundle, threads[0])), file=real)
            return 0
        kind = sniff_kind(a.bundle)
        if kind == "chunk" and a.stages:
            p.error(f"--stages: {a.bundle} is a single-pass bundle (one stage); expected the reference kind or an "
                    "imported VLA")
        if kind is not None and len(threads) > 1 and openvino_delegated(read_any_manifest(a.bundle)):
            code, results = per_thread_process(list(sys.argv[1:] if argv is None else argv), threads)
            if code == 0:
                print(json.dumps(results) if a.json else json.dumps(results, indent=2), file=real)
            return code  # otherwise the child's CLI said why, in one line
        if kind == "vla":  # an imported staged VLA (SmolVLA, pi0, pi0.5): whole chunks per runtime, stages if asked
            bench_staged = importlib.import_module("omni_vla_policies.bench_staged").bench_staged
            results = [bench_staged(a.bundle, n, a.reps, a.warmup, tuple(a.backends), stages=a.stages)
                       for n in threads]
        elif kind == "chunk":  # an imported single-pass policy (format 3): its own interleaved run
            # By name: it imports torch, which the cold-start subprocesses of this module must not pay for.
            bench_chunk = importlib.import_module("omni_vla_policies.bench_chunk").bench_chunk
            results = [bench_chunk(a.bundle, n, a.reps, a.warmup, tuple(a.backends)) for n in threads]
        else:
            results = [bench(a.bundle, n, a.reps, a.warmup, tuple(a.backends), cold=not a.no_cold_start,
                             stages=a.stages) for n in threads]
        print(json.dumps(results) if a.json else json.dumps(results, indent=2), file=real)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
