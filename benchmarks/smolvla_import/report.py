"""Collect one run of run.sh from WORK into results/smolvla_import: import.json, parity.json, stages.json,
stages.png and README.md (figures against the goals, then OUT/notes.md if present). A step that did not finish is
reported as such.

    python report.py WORK OUT --task TASK --command "the command that ran"
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import statistics
from pathlib import Path

PARITY_GOAL_DB = 40.0
CHUNK_GOAL_S = 1.5
STAGES = ("vision", "prefix", "step", "finish")
SUFFIX = {"executorch": "pte", "mnn": "mnn", "onnx": "onnx"}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def load_during(work: Path, step: str) -> dict | None:
    """1-min load average sampled every 20 s while `step` ran (the machine is shared with other jobs)."""
    f = work / "load.jsonl"
    if not f.is_file():
        return None
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["step"] == step]
    last = max((r.get("run", 0) for r in rows), default=0)  # the latest run that did this step
    ld = [r["loadavg"][0] for r in rows if r.get("run", 0) == last]
    if not ld:
        return None
    return {"samples": len(ld), "mean_1min": round(sum(ld) / len(ld), 2), "max_1min": max(ld), "min_1min": min(ld)}


def gnu_time(path: Path) -> dict | None:
    """/usr/bin/time -v: wall seconds, peak RSS, exit status."""
    if not path.is_file():
        return None
    text = path.read_text()
    out: dict = {}
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    if m:
        secs = 0.0
        for part in m.group(1).split(":"):
            secs = secs * 60 + float(part)
        out["wall_s"] = round(secs, 1)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        out["peak_rss_mb"] = round(int(m.group(1)) / 1024, 1)
    m = re.search(r"User time \(seconds\): (\S+)", text)
    if m:
        out["user_s"] = float(m.group(1))
    m = re.search(r"Exit status: (\d+)", text)
    out["exit_status"] = int(m.group(1)) if m else None
    if "Command terminated by signal" in text:
        out["signal"] = text.split("Command terminated by signal")[1].split()[0]
    return out


def first_error(log: Path) -> str | None:
    if not log.is_file():
        return None
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in lines:
        if re.match(r"^\w*(Error|Exception)\b|^[\w.]+Error:|^omni-vla|^parity_import:|^Traceback", ln):
            return ln.strip() if not ln.startswith("Traceback") else (lines[-1].strip())
    return lines[-1].strip() if lines else None


def import_report(work: Path) -> dict:
    bundle = work / "bundle"
    rep: dict = {"checkpoint_by_lerobot": gnu_time(work / "checkpoint.time"),
                 "import": gnu_time(work / "import.time"), "load_during_import": load_during(work, "import"),
                 "load_during_checkpoint": load_during(work, "checkpoint"),
                 "finished": (bundle / "manifest.json").is_file()}
    if not rep["finished"]:
        rc = work / "import.rc"
        rep["error"] = (first_error(work / "import.log") if rc.is_file()
                        else "interrupted (no exit status): " + str(first_error(work / "import.log")))
        partial = sorted(work.glob(".bundle.*"))
        if partial:
            rep["partial_stage_files"] = sorted(p.name for p in partial[-1].iterdir())
        return rep
    files = {p.name: p.stat().st_size for p in bundle.iterdir() if p.is_file()}
    rep["bundle_mb_per_backend"] = {b: round(sum(s for n, s in files.items() if n.endswith("." + suf)) / 1e6, 1)
                                    for b, suf in SUFFIX.items()}
    rep["bundle_mb_per_stage"] = {b: {s: round(files.get(f"{s}.{suf}", 0) / 1e6, 1) for s in STAGES}
                                  for b, suf in SUFFIX.items()}
    rep["bundle_mb_total"] = round(sum(files.values()) / 1e6, 1)
    rep["shared_files"] = {n: s for n, s in files.items() if not n.endswith(tuple("." + x for x in SUFFIX.values()))}
    export = bundle / "export.json"
    if export.is_file():
        ex = json.loads(export.read_text())
        rep["export_s_per_stage"] = {s: {b: v["export_s"] for b, v in d.items()} for s, d in ex["stages"].items()}
        rep["versions"] = ex.get("versions")
    manifest = json.loads((bundle / "manifest.json").read_text())
    rep["architecture"] = manifest["source"]["architecture"]
    return rep


def json_in(text: str) -> dict:
    """The JSON document in a command's stdout. parity_import's stdout also carries MNN's C++ banner
    ("MNN use high precision", written to fd 1 when a runtime is created), so it is not pure JSON."""
    return json.loads(text[text.index("{"):])


def parity_report(work: Path) -> dict:
    rep: dict = {"goal_snr_db": PARITY_GOAL_DB, "note": "inference_s: one whole inference through StagedVLARuntime "
                 "(images to unnormalised chunk), a single call on a shared machine", "per_threads": {}}
    for t in (1, 2):
        f = work / f"parity_t{t}.json"
        if f.is_file() and f.stat().st_size:
            rep["per_threads"][str(t)] = json_in(f.read_text())["backends"]
        else:
            rep["per_threads"][str(t)] = {"error": first_error(work / f"parity_t{t}.log")}
    rep["load_during_parity"] = load_during(work, "parity")
    snrs = {b: r["snr_db"] for t in rep["per_threads"].values() for b, r in t.items() if isinstance(r, dict)}
    if snrs:
        rep["goal_met"] = {b: s >= PARITY_GOAL_DB for b, s in snrs.items()}
    return rep


def stages_report(work: Path) -> dict:
    f = work / "stages_raw.json"
    if not (f.is_file() and f.stat().st_size):
        err = first_error(work / "stages.log")
        if not (work / "stages.rc").is_file():
            err = f"not finished (no output, no exit status); last log line: {err}"
        return {"error": err, "load_during_stages": load_during(work, "stages")}
    raw = json_in(f.read_text())
    summary: dict = {}
    for t, res in raw["per_threads"].items():
        backends = list(res["chain_ms"])
        summary[t] = {b: {"chain_s": round(res["chain_ms"][b] / 1e3, 3),
                          "warm_chain_s": (round(res["cold"][b]["warm_chain_ms"] / 1e3, 3)
                                           if "warm_chain_ms" in res.get("cold", {}).get(b, {}) else None),
                          "gflops": {s: round(raw["flops"][s] / res[s][b]["median_ms"] / 1e6, 1) for s in STAGES}}
                      for b in backends}
    counts = {"vision": raw["arch"]["cameras"], "prefix": 1, "step": raw["arch"]["num_steps"], "finish": 1}
    chunk_flops = sum(counts[s] * raw["flops"][s] for s in STAGES)
    floor = {t: round(chunk_flops / 1e9 / res["sgemm_gflops"], 2) for t, res in raw["per_threads"].items()}
    one = raw["per_threads"].get("1", {}).get("sgemm_gflops")
    ideal = ({t: round(chunk_flops / 1e9 / (int(t) * one), 2) for t in raw["per_threads"]} if one else None)
    best2 = None
    if "2" in summary:
        b, v = min(summary["2"].items(), key=lambda kv: kv[1]["chain_s"])
        best2 = {"backend": b, "chain_s": v["chain_s"], "goal_s": CHUNK_GOAL_S, "goal_met": v["chain_s"] <= CHUNK_GOAL_S}
    return {"summary": summary, "best_at_2_threads": best2, "chunk_gflop": round(chunk_flops / 1e9, 1),
            "chunk_s_at_sgemm_roofline": floor, "chunk_s_at_1thread_sgemm_times_threads": ideal, "load_during_stages": load_during(work, "stages"), **raw}


def plot(stages: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = stages["per_threads"]
    threads = list(per)
    backends = list(per[threads[0]]["chain_ms"])
    counts = {"vision": stages["arch"]["cameras"], "prefix": 1, "step": stages["arch"]["num_steps"], "finish": 1}
    extra = stages.get("bench_runtime_stages")
    fig = plt.figure(figsize=(17, 8 if extra else 4))
    grid = fig.add_gridspec(2 if extra else 1, 5)
    axes = [fig.add_subplot(grid[0, k]) for k in range(5)]
    width = 0.8 / len(backends)
    colors = {"executorch": "tab:blue", "mnn": "tab:orange", "onnxruntime": "tab:green", "torch": "tab:gray"}
    for ax, stage in zip(axes, (*STAGES, "chain")):
        for i, b in enumerate(backends):
            xs = [j + (i - (len(backends) - 1) / 2) * width for j in range(len(threads))]
            if stage == "chain":
                med = [per[t]["chain_ms"][b] for t in threads]
                err = None
            else:
                med = [per[t][stage][b]["median_ms"] for t in threads]
                err = [[0] * len(threads), [max(per[t][stage][b]["p99_ms"] - m, 0) for t, m in zip(threads, med)]]
            ax.bar(xs, med, width, yerr=err, capsize=4, label=b, color=colors.get(b))
            for x, m in zip(xs, med):
                ax.text(x, m, f"{m:.0f}" if m >= 10 else f"{m:.2f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(threads)), [f"{t} thr" for t in threads])
        ax.set_title(f"{stage} (x{counts[stage]} per chunk)" if stage != "chain" else "whole chunk (sum)")
        ax.set_ylabel("ms (median, whisker p99)" if stage != "chain" else "ms (sum of medians)")
    axes[-1].axhline(CHUNK_GOAL_S * 1e3, color="red", ls="--", lw=1, label=f"goal {CHUNK_GOAL_S} s @2 thr")
    axes[-1].legend(fontsize=8, loc="lower right")
    if extra:
        ov = stages.get("bench_runtime_stages_openvino")
        _plot_bench_runtime(fig.add_subplot(grid[1, :4] if ov else grid[1, :]), extra,
                            stages.get("bench_runtime_stages_int8"))
        if ov:
            _plot_openvino(fig.add_subplot(grid[1, 4]), ov)
    fig.suptitle("omni-vla import lerobot: full-size SmolVLA (LeRobot 0.4.4 checkpoint), per-stage latency"
                 + (" (top: bench_vla under load; bottom: bench runtime --stages)" if extra else ""))
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def _plot_bench_runtime(ax, extra: dict, int8: dict | None = None) -> None:  # noqa: ANN001
    """`omni-vla bench runtime --stages` (stored under bench_runtime_stages, and the int8 variant's under
    bench_runtime_stages_int8): each stage's GFLOP/s as a fraction of the sgemm of the same run, per thread count
    and robot runtime."""
    bars = []
    variants = [("", extra["runs"])] + ([(" int8", int8["runs"])] if int8 else [])
    for variant, runs in variants:
        for run in runs:
            for b, got in run["stages"]["backends"].items():
                for stage in ("vision", "prefix", "step"):
                    bars.append((f"{stage}\n{run['threads']} thr {b}{variant}", got["stages"][stage]["fraction_of_sgemm"],
                                 got["stages"][stage]["gflops"], run["threads"]))
    colors = {1: "tab:green", 2: "tab:purple"}  # not the backends' colours above
    ax.bar(range(len(bars)), [f for _, f, _, _ in bars], color=[colors.get(t, "tab:gray") for *_, t in bars])
    for k, (_, f, g, _) in enumerate(bars):
        ax.text(k, f, f"{g:.0f} GFLOP/s", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(bars)), [name for name, *_ in bars], fontsize=7)
    ax.axhline(1.0, color="red", ls="--", lw=1)
    ax.set_ylabel("fraction of sgemm 1024^3 (same run)")
    chunks = ", ".join(f"{r['threads']} thr: {r['backends'][b]['median_ms'] / 1e3:.2f} s {b}{variant}"
                       for variant, runs in variants for r in runs for b in r["backends"])
    when = extra["date"] + (f"; int8 {int8['date']}" if int8 else "")
    ax.set_title(f"omni-vla bench runtime --stages, idle machine ({when}): whole chunk {chunks}", fontsize=9)


def _plot_openvino(ax, ov: dict) -> None:  # noqa: ANN001
    """The OpenVINO-delegated bundle against XNNPACK, whole chunk per interleaved round (bench_runtime_stages_openvino),
    on the busy machine and, where recorded, the idle one (its `idle` entry)."""
    colors = {"openvino": "tab:red", "xnnpack": "tab:blue"}
    groups = [(f"{t} thr\nbusy", ov["summary"][f"{t}_threads"]) for t in (1, 2)]
    if ov.get("idle"):
        groups += [(f"{t} thr\nidle", ov["idle"]["summary"][f"{t}_threads"]) for t in (1, 2)]
    for i, (_, per) in enumerate(groups):
        for j, variant in enumerate(("openvino", "xnnpack")):
            got = [ms / 1e3 for ms in per[f"chunk_ms_{variant}_per_round"]]
            x = i + (j - 0.5) * 0.35
            ax.bar(x, statistics.median(got), 0.35, color=colors[variant], label=variant if i == 0 else None)
            ax.plot([x] * len(got), got, "k.", ms=4)
        ratios = "\n".join(f"{r:.2f}" for r in per["openvino_over_xnnpack_per_round"])
        ax.text(i, max(per["chunk_ms_openvino_per_round"] + per["chunk_ms_xnnpack_per_round"]) / 1e3, ratios,
                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), [name for name, _ in groups], fontsize=7)
    ax.set_ylabel("whole chunk (s), rounds as dots; ov/xnn per round above")
    ax.set_title(f"OpenVINO vs XNNPACK ({ov['date']})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


def fmt(v, unit: str = "") -> str:  # noqa: ANN001
    return "—" if v is None else f"{v}{unit}"


def readme(out: Path, imp: dict, par: dict, stg: dict, command: str, when: str, load_now: str, task: str,
           reported: str) -> None:
    lines = [
        "# SmolVLA full-size import: parity and speed",
        "",
        f"Run started {when} on {platform.node()} ({os.cpu_count()} cores, no GPU), shared with other jobs: `{load_now}` "
        f"when the report was written ({reported}); each JSON holds the 1-min load average sampled every 20 s during its step.",
        "",
        f"Command: `{command}` (benchmarks/smolvla_import/README.md says what each step does).",
        "",
        "Checkpoint: LeRobot 0.4.4 SmolVLAPolicy, seeded random weights, every SmolVLAConfig field at its default "
        "(chunk 50, 10 flow steps, 48 tokens, images resized with padding to 512, 16 VLM layers, expert width 0.75), "
        "the published SmolVLM2-500M-Video-Instruct config, 2 cameras [3,512,512] (front, wrist), state/action 6, "
        f"written by save_pretrained + its processors as lerobot-train does. Task: \"{task}\". The real SmolVLM2 "
        "tokenizer cannot be downloaded here: the tokenizer is a word-level stand-in made with `tokenizers` (ids "
        "< 40, far below the 49280 vocabulary); the padded token count (48) the stages run is the real one.",
        "",
        "## Import (`omni-vla import lerobot`, ONNX + ExecuTorch/XNNPACK + MNN, OMP_NUM_THREADS=1)",
        "",
    ]
    im = imp.get("import") or {}
    if imp.get("finished"):
        lines += [f"- wall {fmt(im.get('wall_s'), ' s')}, peak RSS {fmt(im.get('peak_rss_mb'), ' MB')}, "
                  f"load during it {fmt((imp.get('load_during_import') or {}).get('mean_1min'))} mean",
                  "- bundle MB per backend: " + ", ".join(f"{b} {v}" for b, v in imp["bundle_mb_per_backend"].items())
                  + f" (total {imp['bundle_mb_total']} MB)"]
    else:
        lines += [f"- did not finish: {fmt(imp.get('error'))} (wall {fmt(im.get('wall_s'), ' s')}, "
                  f"peak RSS {fmt(im.get('peak_rss_mb'), ' MB')})"]
    lines += ["", f"## Parity against LeRobot's whole pipeline (goal >= {PARITY_GOAL_DB:.0f} dB end to end, fp32)", "",
              "| threads | backend | SNR dB | max abs | tokens match | one inference s |", "|---|---|---|---|---|---|"]
    for t, res in par["per_threads"].items():
        if "error" in res:
            lines.append(f"| {t} | — | not run: {res['error']} | | | |")
            continue
        for b, r in res.items():
            lines.append(f"| {t} | {b} | {r['snr_db']} | {r['max_abs']:.2e} | {r['tokens_match']} | {r['inference_s']} |")
    if "goal_met" in par:
        lines += ["", "Parity goal: " + ", ".join(f"{b} {'met' if ok else 'NOT met'}" for b, ok in par["goal_met"].items())]
    lines += ["", f"## Speed per stage (bench_vla, robot runtimes; goal: whole chunk <= {CHUNK_GOAL_S} s at 2 threads "
              "on the best one)", ""]
    if "summary" in stg:
        lines += ["| threads | backend | chunk s (sum of stage medians) | chunk s (warm, fresh process) | cold start s "
                  "| process peak RSS MB |", "|---|---|---|---|---|---|"]
        for t, res in stg["summary"].items():
            for b, v in res.items():
                cold = stg["per_threads"][t].get("cold", {}).get(b, {})
                lines.append(f"| {t} | {b} | {v['chain_s']} | {fmt(v['warm_chain_s'])} | {fmt(cold.get('cold_start_s'))} "
                             f"| {fmt(cold.get('peak_rss_mb'))} |")
        lines += ["", "Median ms per stage (p99):", "", "| threads | stage | " + " | ".join(stg["summary"]["1"]) + " |",
                  "|---|---|" + "---|" * len(stg["summary"]["1"])]
        for t, res in stg["per_threads"].items():
            for s in STAGES:
                lines.append(f"| {t} | {s} | " + " | ".join(f"{res[s][b]['median_ms']:.1f} ({res[s][b]['p99_ms']:.1f}) — "
                                                          f"{stg['summary'][t][b]['gflops'][s]} GFLOP/s"
                                                          for b in stg["summary"][t]) + " |")
            lines.append(f"| {t} | sgemm roofline | {res['sgemm_gflops']} GFLOP/s | |")
        best = stg.get("best_at_2_threads")
        if best:
            lines += ["", f"Chunk goal: best at 2 threads is {best['backend']} at {best['chain_s']} s: "
                          f"{'met' if best['goal_met'] else 'NOT met'} (goal {CHUNK_GOAL_S} s)."]
        lines += ["", f"One chunk is {stg['chunk_gflop']} GFLOP (2 x vision + prefix + 10 x step, counted on the eager "
                  "stages); at this CPU's measured 1024^3 sgemm rate that alone takes "
                  + ", ".join(f"{v} s at {t} thread(s)" for t, v in stg["chunk_s_at_sgemm_roofline"].items())
                  + (f"; with the 1-thread rate scaled perfectly to 2 threads (a shared machine can lower the 2-thread "
                     f"sgemm) {stg['chunk_s_at_1thread_sgemm_times_threads'].get('2')} s"
                     if stg.get("chunk_s_at_1thread_sgemm_times_threads") else "")
                  + f". Above {CHUNK_GOAL_S} s either way: fp32 on this CPU cannot meet the chunk goal even at the "
                  "sgemm roofline.", "",
                  "![stages](stages.png)"]
    else:
        lines += [f"not measured: {fmt(stg.get('error'))}"]
    notes = out / "notes.md"  # hand-written observations on the run, kept across re-reports
    if notes.is_file():
        lines += ["", notes.read_text().rstrip()]
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--task", required=True)
    p.add_argument("--command", required=True)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    now, load_now = dt.datetime.now().astimezone().isoformat(timespec="seconds"), uptime()
    code = (a.work / "code.txt").read_text().strip().splitlines() if (a.work / "code.txt").is_file() else []
    common = {"date": now, "code_per_run": code, "uptime_at_report": load_now, "command": a.command, "task": a.task, "cpus": os.cpu_count()}
    imp, par, stg = import_report(a.work), parity_report(a.work), stages_report(a.work)
    for name, rep in (("import", imp), ("parity", par), ("stages", stg)):
        (a.out / f"{name}.json").write_text(json.dumps({**common, **rep}, indent=1) + "\n")
    if "per_threads" in stg:
        plot(stg, a.out / "stages.png")
    started = [ln.split()[2] for ln in code if ln.startswith("run ")]
    readme(a.out, imp, par, stg, a.command, started[-1] if started else now, load_now, a.task, now)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
