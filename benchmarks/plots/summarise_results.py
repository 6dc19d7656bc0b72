"""One-off: compact summaries of the raw result files that back the figures of record.

Run once on the tree that still held the raw files; each summary names every file it was computed from
(`sources`), so `git show <commit>:results/<source>` recovers any of them:

    python benchmarks/plots/summarise_results.py --src results --out results

Nothing here is typed in: every number is read or computed from a file under --src.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
from pathlib import Path

EVAL_SETTINGS = ("backend", "strategy", "delay_ticks", "execution_horizon", "noise_scale", "seed_base", "episodes",
                 "held_out", "bundle_dir")
SWEEP_METRICS = ("successes", "episodes", "per_task", "shaping_per_episode", "clamps_per_episode",
                 "clamps_by_kind_per_episode", "jerk_mean")


def _load(path: Path):
    """A JSON file; lines a runtime printed to stdout before the JSON (e.g. "MNN use high precision") are skipped."""
    text = path.read_text()
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=0)
    return json.loads(text[start:])


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eval_run(src: Path, rel: str, **extra) -> dict:
    """One `omni-vla eval --json` report: per-task successes/episodes, totals, settings and bundle."""
    d = _load(src / rel)
    per_task = {t: [v["successes"], v["episodes"]] for t, v in d["tasks"].items()}
    o = d.get("overall", {})
    run = {"source": rel,
           "successes": sum(s for s, _ in per_task.values()),
           "episodes": sum(n for _, n in per_task.values()),
           "per_task": per_task,
           "settings": {k: d.get("settings", {}).get(k) for k in EVAL_SETTINGS if k in d.get("settings", {})},
           "bundle_manifest_sha256": (d.get("versions", {}).get("bundle_manifest_sha256") or "")[:8] or None}
    for k in ("shaping_per_episode", "clamps_per_episode", "interventions_per_episode"):
        if k in o:
            run[k] = o[k]
    run.update(extra)
    return run


def merge_runs(runs: list[dict], **extra) -> dict:
    """Several reports over disjoint tasks of the same setting, as one run."""
    per_task: dict = {}
    for r in runs:
        per_task.update(r["per_task"])
    return {"source": [r["source"] for r in runs], "successes": sum(r["successes"] for r in runs),
            "episodes": sum(r["episodes"] for r in runs), "per_task": per_task, "settings": runs[0]["settings"],
            "bundle_manifest_sha256": runs[0]["bundle_manifest_sha256"], **extra}


def sweep_rows(src: Path, rel: str, **extra) -> list[dict]:
    """Rows of an experiments/*/sweep.py jsonl: the swept parameters, then the counts as written."""
    out = []
    for i, row in enumerate(_jsonl(src / rel)):
        params = {k: v for k, v in row.items() if k not in SWEEP_METRICS}
        run = {"source": f"{rel}:{i + 1}", "params": params}
        for k in SWEEP_METRICS:
            if k in row:
                run[k] = row[k]
        if "per_task" in run and isinstance(next(iter(run["per_task"].values())), int):
            n = row["episodes"] // len(run["per_task"])
            run["per_task"] = {t: [s, n] for t, s in run["per_task"].items()}
        run.update(extra)
        out.append(run)
    return out


def same_outcomes(src: Path, rels: list[str]) -> dict:
    """Whether every episode (task, seed) has the same success in each of the episodes.json files."""
    maps = []
    for rel in rels:
        maps.append({(e["task"], e["seed"]): bool(e["success"]) for e in _load(src / rel)})
    keys = set(maps[0])
    common = [k for k in keys if all(k in m for m in maps[1:])]
    differ = sorted(f"{t}:{s}" for t, s in common if len({m[(t, s)] for m in maps}) > 1)
    return {"files": rels, "episodes_compared": len(common), "episodes_differing": len(differ), "differing": differ}


def reported_seeds(src: Path) -> dict:
    runs = []
    for bundle_dir, label in (("reported_correction_demos", "shipped bundle"),
                              ("reported_node_config", "previous bundle")):
        for be in ("torch", "executorch", "mnn"):
            runs.append(eval_run(src, f"{bundle_dir}/compare_backends/{be}/report.json",
                                 name=f"{label}, {be}", group=label))
        runs.append(eval_run(src, f"{bundle_dir}/heldout_mnn/report.json", name=f"{label}, mnn, held-out phrasings",
                             group=label))
    runs.append(eval_run(src, "safety/eval_margin/report.json", name="shipped bundle, mnn, supervisor as shipped",
                         group="supervisor"))
    runs.append(eval_run(src, "safety/eval_margin0/report.json", name="shipped bundle, mnn, limit_margin 0",
                         group="supervisor"))
    agreement = {
        "shipped bundle, backends": same_outcomes(
            src, [f"reported_correction_demos/compare_backends/{b}/episodes.json" for b in ("torch", "executorch", "mnn")]),
        "previous bundle, backends": same_outcomes(
            src, [f"reported_node_config/compare_backends/{b}/episodes.json" for b in ("torch", "executorch", "mnn")]),
        "limit_margin 0 against the shipped bundle's mnn record": same_outcomes(
            src, ["safety/eval_margin0/episodes.json", "reported_correction_demos/compare_backends/mnn/episodes.json"]),
    }
    return {"what": "closed-loop success on the reported seeds (1,000,000+), 50 episodes per task",
            "runs": runs, "same_outcome_per_episode": agreement}


def training(src: Path) -> dict:
    runs = []
    for p in sorted(glob.glob(str(src / "one_hour" / "val*.json"))):
        rel = os.path.relpath(p, src)
        runs.append(eval_run(src, rel, name=Path(p).stem))
    logs = []
    for p in sorted(glob.glob(str(src / "one_hour" / "train_*.log"))):
        done = [r for r in (_try_json(line) for line in Path(p).read_text().splitlines()) if r and r.get("event") == "done"]
        if done:
            d = done[-1]
            logs.append({"source": os.path.relpath(p, src), "name": Path(p).stem,
                         **{k: d[k] for k in ("steps", "wall_minutes", "minutes", "final_loss_avg", "val_loss",
                                              "recovery_minutes", "train_samples") if k in d}})
    return {"what": "validation of one-hour training runs (seeds 1,100,000+ and up, 60 episodes per task per seed "
                    "base) and each training log's final line",
            "runs": runs, "training_logs": logs,
            "step_speed": {"source": "one_hour/step_speed.json", **_load(src / "one_hour" / "step_speed.json")}}


def _try_json(line: str):
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def loop_settings(src: Path) -> dict:
    c = "chunking_d1_validation"
    splice = [merge_runs([eval_run(src, f"{c}/{s}.json"), eval_run(src, f"{c}/{s}_pick_touch.json")],
                         name=f"{s}, delay 1") for s in ("naive", "average", "rtc")]
    splice += sweep_rows(src, "splice_blend/sweep_reported.jsonl", name="naive, blend 3, reported seeds")
    splice += sweep_rows(src, "splice_blend/sweep_validation.jsonl", name="naive, blend 3, validation")
    horizon = [eval_run(src, os.path.relpath(p, src), name=Path(p).stem)
               for p in sorted(glob.glob(str(src / c / "execution_horizon" / "*.json")))]
    horizon += [eval_run(src, f"tune_sampling/avg1234_eh{h}_noise0.json", name=f"avg1234_eh{h}_noise0") for h in (8, 12)]
    shaping = [eval_run(src, "command_shaping/eval_reported.json", name="shaping shipped, reported seeds"),
               eval_run(src, "command_shaping/sim_graph/demo_shaped_5x4.json", name="shaping shipped, sim graph")]
    for f in ("validation_shipped_f5f34c7", "validation_lead_0015", "validation_never_passing_form", "prototype_f5f34c7"):
        shaping += sweep_rows(src, f"command_shaping/{f}.jsonl", name=f)
    smoothing = [eval_run(src, f"supervisor_smoothing/{f}.json", name=f)
                 for f in ("eval_reported_gripper025", "eval_reported_smoothing025_gripper025")]
    for f in ("sweep_reported_base", "sweep_reported", "sweep_val_shipped", "sweep_val200", "sweep_val1200",
              "sweep_smoothing", "sweep_smoothing2"):
        smoothing += sweep_rows(src, f"supervisor_smoothing/{f}.jsonl", name=f)
    ts = _load(src / "tune_sampling" / "tune_sampling.json")
    sampling = [{"source": f"tune_sampling/tune_sampling.json:runs[{i}]", "name": f"eh {r['execution_horizon']}, "
                 f"noise {r['noise_scale']}", "params": {"execution_horizon": r["execution_horizon"],
                                                         "noise_scale": r["noise_scale"]},
                 "successes": r["successes"], "episodes": r["episodes"],
                 "per_task": {t: [int(v.split("/")[0]), int(v.split("/")[1])] for t, v in r["tasks"].items()}}
                for i, r in enumerate(ts["runs"])]
    return {"what": "closed-loop settings: chunk splicing and crossfade (decision 0001), command shaping (0002), "
                    "supervisor smoothing (0003), execution horizon and sampling noise",
            "groups": {"splicing": splice, "execution_horizon": horizon, "command_shaping": shaping,
                       "supervisor_smoothing": smoothing,
                       "sampling": {"bundle": ts["bundle"], "backend": ts["backend"], "seeds": ts["seeds"],
                                    "runs": sampling}}}


def runtime_limits_ab(src: Path) -> dict:
    return {name: {"source": f"runtime_limits/{name}.json", "result": _load(src / f"runtime_limits/{name}.json")}
            for name in ("stepped_ab", "cross_fold_ab", "et_fp16_ab")}


def vla_stages(src: Path) -> dict:
    b = _load(src / "vla/bench_full_idle_1thread.json")
    out = {"what": "SmolVLA (450 M, random weights) per stage: parity against LeRobot's SmolVLA and median time",
           "parity_snr_db": {"fp32": {"source": "vla/parity_full.json", **_load(src / "vla/parity_full.json")["snr_db"]},
                             "int8": {"source": "vla/parity_int8.json", **_load(src / "vla/parity_int8.json")["snr_db"]}},
           "stage_ms_1thread_idle": {"source": "vla/bench_full_idle_1thread.json",
                                     "flops": b["flops"], "per_stage": b["per_threads"]["1"],
                                     "per_chunk_counts": {"vision": b["arch"]["cameras"], "prefix": 1,
                                                          "step": b["arch"]["num_steps"], "finish": 1}},
           "openvino": {}}
    for t in (1, 2):
        rel = f"vla/openvino/stages_fp32_{t}thread_with_eager.json"
        d = _load(src / rel)
        out["openvino"][str(t)] = {"source": rel, "load_average": d.get("load_average"),
                                   "stages": {s: {k: v[k] for k in ("median_ms", "vs_onnxruntime", "vs_torch",
                                                                     "snr_db_vs_eager") if k in v}
                                              for s, v in d["stages"].items()}}
    return out


def vla_loop(src: Path) -> dict:
    keys = ("tick_lateness_ms", "vla_tick_lateness_ms", "missed_ticks", "limits_oracle", "loadavg", "bundle",
            "vla_params", "proposed_period_ms", "safe_period_ms")
    runs = []
    for name in ("graph_int8_4hz", "graph_int8_5hz", "graph_fp32_2hz", "graph_fp32_2hz_worker_cpu1",
                 "graph_fp32_2hz_worker_cpu1_b"):
        rel = f"vla_loop/{name}.json"
        d = _load(src / rel)
        run = {"source": rel, "name": name, "ratios": d.get("ratios")}
        for side in ("policy", "reference"):
            p = d[side]
            run[side] = {k: p.get(k) for k in keys}
            run[side]["vla_loop"] = p.get("vla_loop")
        runs.append(run)
    return {"what": "omni-vla bench graph --compare-reference: the SmolVLA bundle and the reference bundle in one "
                    "command; tick lateness of the vla_node loop (vla_tick_lateness_ms) and of the supervisor "
                    "(tick_lateness_ms), p99 and max", "runs": runs}


def cold_start(src: Path) -> dict:
    groups = {}
    for rel in ("launch_cold_start/no_pyc_dcc864d.jsonl", "launch_cold_start/ab_spare_worker_dcc864d.jsonl",
                "launch_cold_start/probe_profile_no_pyc_0f34f1c.jsonl",
                "launch_cold_start/probe_profile_pyc_0f34f1c.jsonl"):
        for row in _jsonl(src / rel):
            default = "0f34f1c (no .pyc), busy machine" if "no_pyc_0f34f1c" in rel else "0f34f1c, busy machine"
            label = row.get("install", default)
            g = groups.setdefault(label, {"source": rel, "launches": []})
            g["launches"].append({k: v for k, v in row.items() if k != "install"})
    for g in groups.values():
        xs = sorted(r["safe_after_proposal"] for r in g["launches"])
        n = len(xs)
        g["safe_after_proposal_s"] = {"median": (xs[(n - 1) // 2] + xs[n // 2]) / 2, "min": xs[0], "max": xs[-1],
                                      "n": n, "n_le_2s": sum(x <= 2.0 for x in xs)}
    return {"what": "seconds from `ros2 launch` to the first safe command after the first proposal "
                    "(safe_after_proposal), MNN, per install", "groups": groups}


def lerobot_act(src: Path) -> dict:
    runs = [eval_run(src, os.path.relpath(p, src), name=Path(p).stem)
            for p in sorted(glob.glob(str(src / "lerobot_act/eval/*.json")))]

    def losses(rel: str) -> dict:
        out = {}
        for line in (src / rel).read_text().splitlines():
            f = dict(part.split(":", 1) for part in line.split() if ":" in part)
            if "step" in f and "loss" in f:
                out[f["step"]] = float(f["loss"])
        return out

    files = {}
    pattern = ("bench_runtime.json", "openloop_*.json", "openvino/*", "speed_2026-12-02/*", "speed_2026-12-02_avx2/*")
    for p in sorted(q for pat in pattern for q in glob.glob(str(src / "lerobot_act" / pat))):
        rel = os.path.relpath(p, src)
        if p.endswith(".json"):
            files[rel] = _load(Path(p))
        elif p.endswith(".jsonl"):
            files[rel] = _jsonl(Path(p))
        else:
            files[rel] = Path(p).read_text().strip()
    return {"what": "imported LeRobot ACT: closed loop on the reported seeds, training loss, speed and open-loop "
                    "error (files as written, by path)",
            "runs": runs,
            "loss": {"normalised_init": {"source": "lerobot_act/normalised_init_loss.txt",
                                         "by_step": losses("lerobot_act/normalised_init_loss.txt")},
                     "resume_5000_to_15000": {"source": "lerobot_act/train_resume_5000_to_15000_loss.txt",
                                              "by_step": losses("lerobot_act/train_resume_5000_to_15000_loss.txt")}},
            "files": files}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("results"))
    a = ap.parse_args()
    outputs = {
        "reported_seeds.json": reported_seeds(a.src),
        "one_hour/validation.json": training(a.src),
        "loop_settings.json": loop_settings(a.src),
        "runtime_limits/ab.json": runtime_limits_ab(a.src),
        "vla/stages.json": vla_stages(a.src),
        "vla_loop/graphs.json": vla_loop(a.src),
        "launch_cold_start/cold_start.json": cold_start(a.src),
        "lerobot_act/summary.json": lerobot_act(a.src),
    }
    for rel, data in outputs.items():
        path = a.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, allow_nan=True) + "\n")
        print(path, path.stat().st_size)


if __name__ == "__main__":
    main()
