"""Plots of the figures of record: reads the JSON files under results/ and writes `<name>.png` beside each.

    python benchmarks/plots/make_plots.py [--results results] [--only vla_loop/graphs.json ...]

PLOTS maps each plotted JSON (relative to results/) to the function drawing it; docs/results.md names the plot of
each figure and tests/tools/test_results_record.py checks that every JSON listed here has its PNG.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

Z95 = 1.959963984540054
COLORS = {"torch": "tab:gray", "torch-folded": "silver", "onnxruntime": "tab:green", "executorch": "tab:blue",
          "mnn": "tab:orange", "executorch_xnnpack": "tab:blue", "executorch_openvino": "tab:purple"}
TASKS = ("pick_red", "place_blue_on_green", "stack_red_on_blue", "touch_yellow")


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def _rate_bar(ax, xs, counts, width, label=None, color=None):  # noqa: ANN001
    """Bars of success rate (%) with Wilson 95% whiskers; counts: [(successes, episodes)]."""
    rates = [100 * s / n if n else 0 for s, n in counts]
    lo = [max(0.0, r - 100 * wilson(s, n)[0]) for r, (s, n) in zip(rates, counts)]
    hi = [max(0.0, 100 * wilson(s, n)[1] - r) for r, (s, n) in zip(rates, counts)]
    ax.bar(xs, rates, width, yerr=[lo, hi], capsize=2, label=label, color=color)


def _rate_barh(ax, runs: list[dict], title: str) -> None:
    """Horizontal bars of overall success with Wilson 95% whiskers, one per run, labelled with s/n."""
    ys = list(range(len(runs)))
    rates = [100 * r["successes"] / r["episodes"] for r in runs]
    ci = [wilson(r["successes"], r["episodes"]) for r in runs]
    ax.barh(ys, rates, xerr=[[max(0.0, r - 100 * a) for r, (a, _) in zip(rates, ci)],
                             [max(0.0, 100 * b - r) for r, (_, b) in zip(rates, ci)]],
            capsize=2, color="tab:blue")
    ax.set_yticks(ys, [f"{r['name']}  ({r['successes']}/{r['episodes']})" for r in runs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("success % (whisker: Wilson 95%)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)


def _per_task(ax, runs: list[dict], title: str) -> None:
    """Grouped bars: success per task for each run, Wilson 95% whiskers."""
    tasks = [t for t in TASKS if any(t in r["per_task"] for r in runs)]
    width = 0.8 / max(len(runs), 1)
    cmap = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20")
    for i, r in enumerate(runs):
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(tasks))]
        _rate_bar(ax, xs, [tuple(r["per_task"].get(t, (0, 0))) for t in tasks], width,
                  label=f"{r['name']} ({r['successes']}/{r['episodes']})", color=cmap(i))
    ax.set_xticks(range(len(tasks)), tasks, fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("success % (whisker: Wilson 95%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="lower left")
    ax.grid(axis="y", alpha=0.3)


def plot_reported_seeds(d: dict, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(12, 5))
    _per_task(ax, d["runs"], d["what"])
    _save(fig, out)


def plot_runs_overall(d: dict, out: Path) -> None:
    runs = d["runs"]
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(runs) + 1.5))
    _rate_barh(ax, runs, d["what"][:110])
    _save(fig, out)


def plot_loop_settings(d: dict, out: Path) -> None:
    groups = {k: (v["runs"] if isinstance(v, dict) else v) for k, v in d["groups"].items()}
    heights = [0.22 * len(v) + 0.8 for v in groups.values()]
    fig, axes = plt.subplots(len(groups), 1, figsize=(13, sum(heights) + 1),
                             gridspec_kw={"height_ratios": heights})
    for ax, (name, runs) in zip(axes, groups.items()):
        labelled = [{**r, "name": r.get("name", "") + _params(r)} for r in runs]
        _rate_barh(ax, labelled, name)
    _save(fig, out)


def _params(r: dict) -> str:
    p = r.get("params") or {}
    return (" [" + ", ".join(f"{k}={v}" for k, v in p.items()) + "]") if p else ""


def plot_bench_runtime(d, out: Path) -> None:  # noqa: ANN001
    """Median ms per runtime, split into prefix and flow stages, one panel per thread count (p99 as a tick)."""
    runs = d if isinstance(d, list) else [d]
    _bench_panels(runs, out, "omni-vla bench runtime --stages: one inference (prefix + 10 flow steps)")


def _bench_panels(runs: list[dict], out: Path, title: str, labels: list[str] | None = None) -> None:
    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 4.2), squeeze=False)
    for k, (ax, r) in enumerate(zip(axes[0], runs)):
        names = [b for b in COLORS if b in r and isinstance(r[b], dict) and "median_ms" in r[b]]
        xs = range(len(names))
        pre = [r[b].get("stages", {}).get("prefix_ms", 0.0) for b in names]
        flow = [r[b].get("stages", {}).get("flow_ms", 0.0) for b in names]
        med = [r[b]["median_ms"] for b in names]
        ax.bar(xs, pre, color=[COLORS[b] for b in names], alpha=0.55, label="prefix (stage median)")
        ax.bar(xs, flow, bottom=pre, color=[COLORS[b] for b in names], label="flow (stage median)")
        ax.scatter(xs, [r[b]["p99_ms"] for b in names], marker="_", s=300, color="k", label="whole p99", zorder=3)
        for x, m in zip(xs, med):
            ax.text(x, m, f"{m:.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs), names, rotation=20, fontsize=8)
        ax.set_ylabel("ms per inference (label: whole median)")
        ax.set_title((labels[k] + ", " if labels else "") + f"{r.get('threads', '?')} thread(s)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    _save(fig, out)


def plot_vla_stages(d: dict, out: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
    st = d["stage_ms_1thread_idle"]
    per, counts = st["per_stage"], st["per_chunk_counts"]
    stages = [s for s in ("vision", "prefix", "step", "finish") if s in per]
    backends = list(per[stages[0]])
    width = 0.8 / len(backends)
    ax = axes[0]
    for i, b in enumerate(backends):
        xs = [j + (i - (len(backends) - 1) / 2) * width for j in range(len(stages) + 1)]
        meds = [per[s][b]["median_ms"] for s in stages]
        chunk = sum(per[s][b]["median_ms"] * counts[s] for s in stages)
        ax.bar(xs, [m / 1e3 for m in meds] + [chunk / 1e3], width, color=COLORS.get(b), label=b)
        ax.text(xs[-1], chunk / 1e3, f"{chunk / 1e3:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(stages) + 1), [f"{s} (x{counts[s]})" for s in stages] + ["per chunk"], fontsize=8)
    ax.set_ylabel("s (median)")
    ax.set_title("SmolVLA per stage, 1 thread, idle machine", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    ov = d["openvino"]
    names = list(next(iter(ov.values()))["stages"])
    rts = list(next(iter(ov.values()))["stages"][names[0]]["median_ms"])
    cols = [(t, s) for t in ov for s in names]
    width = 0.8 / len(rts)
    for i, b in enumerate(rts):
        xs = [j + (i - (len(rts) - 1) / 2) * width for j in range(len(cols))]
        ax.bar(xs, [ov[t]["stages"][s]["vs_onnxruntime"][b] for t, s in cols], width, color=COLORS.get(b), label=b)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(cols)), [f"{s}\n{t} thr" for t, s in cols], fontsize=7)
    ax.set_ylabel("speed vs onnxruntime (x)")
    ax.set_title("ExecuTorch OpenVINO delegate, fp32", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[2]
    par = d["parity_snr_db"]
    pstages = ["vision", "prefix_keys", "prefix_values", "step", "end_to_end"]
    keys = [(dt, b) for dt in par for b in par[dt] if b != "source"]
    width = 0.8 / len(keys)
    for i, (dt, b) in enumerate(keys):
        xs = [j + (i - (len(keys) - 1) / 2) * width for j in range(len(pstages))]
        ax.bar(xs, [par[dt][b].get(s, 0) for s in pstages], width, color=COLORS.get(b),
               alpha=1.0 if dt == "fp32" else 0.45, label=f"{b} {dt}")
    ax.set_xticks(range(len(pstages)), pstages, fontsize=7)
    ax.set_ylabel("SNR dB vs LeRobot's SmolVLA")
    ax.set_title("parity per stage", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    _save(fig, out)


def plot_vla_loop(d: dict, out: Path) -> None:
    runs = d["runs"]
    ab = d.get("executor_priority")
    fig, axes = plt.subplots(1, 3 if ab else 2, figsize=(20 if ab else 14, 4.5))
    if ab:
        _plot_executor_priority(axes[2], ab)
    for ax, key, title in ((axes[0], "vla_tick_lateness_ms", "vla_node loop tick lateness"),
                           (axes[1], "tick_lateness_ms", "supervisor tick lateness")):
        xs = range(len(runs))
        w = 0.2
        for k, (side, stat, off, alpha) in enumerate((("policy", "p99", -1.5, 1.0), ("reference", "p99", -0.5, 1.0),
                                                      ("policy", "max", 0.5, 0.45), ("reference", "max", 1.5, 0.45))):
            vals = [(r[side].get(key) or {}).get(stat, 0) for r in runs]
            ax.bar([x + off * w for x in xs], vals, w, alpha=alpha, label=f"{side} {stat}",
                   color="tab:red" if side == "policy" else "tab:gray")
        ax.set_yscale("log")
        ax.set_xticks(list(xs), [r["name"].replace("graph_", "") for r in runs], rotation=15, fontsize=7)
        ax.set_ylabel("ms (log)")
        ax.set_title(title + " (policy: SmolVLA bundle; reference: shipped bundle, same command)", fontsize=8)
        ax.legend(fontsize=7)
        for x, r in zip(xs, runs):
            vl = r["policy"].get("vla_loop") or {}
            ax.text(x, ax.get_ylim()[0] * 1.05, f"missed {vl.get('missed_ticks', '?'):g}\nstarved "
                    f"{vl.get('starved_ticks', '?'):g}" if isinstance(vl.get("missed_ticks"), (int, float)) else "",
                    ha="center", va="bottom", fontsize=6)
    _save(fig, out)


def _plot_executor_priority(ax: "plt.Axes", ab: dict) -> None:
    """vla_node's loop lateness p99 per run, by the priority of its other threads (interleaved rounds)."""
    runs = ab["runs"] + ab.get("python_threads", {}).get("runs", [])
    builds = list(dict.fromkeys(r["build"] for r in runs))
    for i, build in enumerate(builds):
        vals = [r["vla_tick_lateness_ms"]["p99"] for r in runs if r["build"] == build]
        ax.scatter([i] * len(vals), vals, s=18)
        ax.plot([i - 0.2, i + 0.2], [statistics.median(vals)] * 2, color="k", lw=1.5)
    ax.set_yscale("log")
    ax.set_xticks(range(len(builds)), [b.replace(" SCHED", "\nSCHED").replace(" normal", "\nnormal") for b in builds],
                  fontsize=6)
    ax.set_xlim(-0.6, len(builds) - 0.4)
    ax.set_ylabel("vla_node loop tick lateness p99, ms (log; bar: median)")
    ax.set_title("reference bundle, 2 CPU burners, 60-s windows, rounds interleaved", fontsize=8)


def plot_cold_start(d: dict, out: Path) -> None:
    groups = d["groups"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    names = list(groups)
    data = [[r["safe_after_proposal"] for r in groups[n]["launches"]] for n in names]
    ax.boxplot(data, orientation="horizontal", whis=(0, 100))
    for i, xs in enumerate(data):
        ax.scatter(xs, [i + 1 + 0.12 * ((k % 5) - 2) / 2 for k in range(len(xs))], s=8, alpha=0.6)
    ax.axvline(2.0, color="red", ls="--", lw=1, label="goal 2 s")
    ax.set_yticks(range(1, len(names) + 1),
                  [f"{n} (n={len(x)}, median {groups[n]['safe_after_proposal_s']['median']:.2f} s)"
                   for n, x in zip(names, data)], fontsize=7)
    ax.set_xlabel("s from ros2 launch to the first safe command (safe_after_proposal)")
    ax.set_title("cold start, MNN", fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, out)


def plot_shutdown(d: dict, out: Path) -> None:
    """Per process, the exit times after each kind of stop, one panel per measured build (benchmarks/shutdown)."""
    builds = d["builds"]
    fig, axes = plt.subplots(1, len(builds), figsize=(6 * len(builds), 4.5), squeeze=False, sharex=True)
    colors = {"ctrl-c": "tab:blue", "sigterm": "tab:orange", "launch": "tab:green"}
    for ax, (label, report) in zip(axes[0], builds.items()):
        names = sorted({n for stop in report["stops"].values() for r in stop["runs"] for n in r["exit_s"]})
        for k, (stop, data) in enumerate(report["stops"].items()):
            s = data["summary"]
            for i, name in enumerate(names):
                xs = [r["exit_s"][name] for r in data["runs"] if name in r["exit_s"]]
                ys = [i + (k - 1) * 0.22] * len(xs)
                ax.scatter(xs, ys, s=10, alpha=0.6, color=colors.get(stop),
                           label=f"{stop}: {s['ok']}/{s['runs']} clean, max {s['max_exit_s']:.2f} s"
                           + (f", graph up {s['graph_up']}/{s['runs']}" if "graph_up" in s else "") if i == 0 else None)
        ax.axvline(report["budget_s"], color="red", ls="--", lw=1)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_xlabel("s from the stop signal until the process is gone")
        ax.set_title(f"{label}, {report['burners']} CPU burners", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    _save(fig, out)


def _soak_axes(axes, d: dict, what: str) -> None:  # noqa: ANN001
    """RSS of every process of the launched graph over the soak, and each window's worst p99 tick lateness per node."""
    growth = d["summary"]["rss_growth_mib_per_h"]
    for name, samples in sorted(d["samples"].items()):
        g = growth.get(name)
        axes[0].plot([s[0] / 60.0 for s in samples], [s[1] for s in samples],
                     label=f"{name} ({'-' if g is None else f'{g:+.2f}'} MiB/h)")
    axes[0].set_xlabel("minutes since the graph was up")
    axes[0].set_ylabel("RSS (MiB)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    runs = ([("", d, "-")] + ([("reference bundle, ", d["reference"], "--")] if "reference" in d else [])
            + ([(f"{d['earlier']['label']}, ", d["earlier"], ":")] if "earlier" in d else []))
    for prefix, run, style in runs:
        for node in ("vla_node", "safety_supervisor", "machine_probe"):
            pts = [(w["t_end_s"] / 60.0, w["p99_lateness_ms"][node]) for w in run["windows"]
                   if node in w["p99_lateness_ms"]]
            if not pts:
                continue
            axes[1].plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=prefix + node)
    axes[1].set_yscale("log")
    axes[1].set_xlabel("end of window (minutes)")
    axes[1].set_ylabel("worst p99 tick lateness in the window (ms)")
    axes[1].legend(fontsize=8)
    s = d["summary"]
    axes[0].set_title(f"{what}: missed ticks vla {s['vla_missed_ticks']}, supervisor {s['supervisor_missed_ticks']}; "
                      f"clamps {s['supervisor_clamps_total']}; fd growth {max(s['fd_growth'].values(), default=0)}"
                      + (f"\np99 over the reference's: {s['ratios_to_reference']}" if "reference" in d else ""),
                      fontsize=8, loc="left")


def plot_soak(d: dict, out: Path) -> None:
    """benchmarks/soak/run.py: one soak."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    _soak_axes(axes, d, f"benchmarks/soak/run.py --minutes {d['minutes']:g}")
    _save(fig, out)


def plot_soak_runs(d: dict, out: Path) -> None:
    """benchmarks/soak/run.py: several soaks of one bundle, a row each."""
    fig, axes = plt.subplots(len(d["runs"]), 2, figsize=(15, 5.5 * len(d["runs"])), squeeze=False)
    for row, (name, run) in zip(axes, d["runs"].items()):
        _soak_axes(row, run, name)
        params = run["params"]  # each run's own: the rows differ in rate and worker settings
        row[1].set_xlabel("end of window (minutes)\n" + " ".join(params[: len(params) // 2]) + "\n"
                          + " ".join(params[len(params) // 2:]), fontsize=7)
    _save(fig, out)


def plot_loop_soak(d: dict, out: Path) -> None:
    """RSS of the ROS-free loop's process and its worker per window, and each window's p50/p99/max tick lateness
    (benchmarks/soak/loop.py)."""
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.5))
    s, ws = d["summary"], d["windows"]
    minutes = [w["t_end_s"] / 60.0 for w in ws]
    for name, g in sorted(s["rss_growth_mib_per_h"].items()):
        axes[0].plot(minutes, [w["rss_mib"][name] for w in ws], marker=".",
                     label=f"{name} ({'-' if g is None else f'{g:+.3f}'} MiB/h after the first window)")
    axes[0].set_xlabel("minutes")
    axes[0].set_ylabel("RSS (MiB)")
    axes[0].legend(fontsize=8)
    for key, style in (("p50_lateness_ms", ":"), ("p99_lateness_ms", "-"), ("max_lateness_ms", "--")):
        axes[1].plot(minutes, [w[key] for w in ws], style, label=key.replace("_", " "))
    probe = [(m, w["machine_probe"]["p99"]) for m, w in zip(minutes, ws) if "p99" in w.get("machine_probe", {})]
    if probe:
        axes[1].plot(*zip(*probe), "-", color="grey", alpha=0.6, label="machine probe p99 (probe.py, 100 Hz)")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("end of window (minutes)")
    axes[1].set_ylabel(f"tick lateness per window of {d['settings']['window_ticks']:,} ticks (ms)")
    axes[1].legend(fontsize=8)
    keys = ("earlier", "before_spin_cap", "stress_horizon_1_before_spin_cap")
    runs = [("this run", d)] + [(k.replace("_", " "), d[k]) for k in keys if k in d]
    for label, run in runs:
        axes[2].plot([w["t_end_s"] / 60.0 for w in run["windows"]], [w["missed_ticks"] for w in run["windows"]],
                     marker="o", label=f"{label} (horizon {run['settings']['execution_horizon']})")
    axes[2].set_xlabel("end of window (minutes)")
    axes[2].set_ylabel("missed ticks per window")
    axes[2].legend(fontsize=8)
    st = d["settings"]
    fig.suptitle(f"benchmarks/soak/loop.py --rate-hz {st['rate_hz']:g} --ticks {st['ticks']:,} ({st['backend']}): "
                 f"{s['ticks']:,} ticks, missed {s['missed_ticks']}, starved {s['starved_ticks']}, "
                 f"fd growth {s['fd_growth_after_first_window']}, p99 worst/first {s['p99_worst_over_first']}",
                 fontsize=9)
    _save(fig, out)


def plot_fuzz(d: dict, out: Path) -> None:
    rows = d["fuzz"]
    robots = list(dict.fromkeys(r["robot"] for r in rows))
    rates = list(dict.fromkeys(r["rate_hz"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    w = 0.8 / len(rates)
    for i, hz in enumerate(rates):
        xs = [j + (i - (len(rates) - 1) / 2) * w for j in range(len(robots))]
        by = {r["robot"]: r for r in rows if r["rate_hz"] == hz}
        steps = [by[rb]["steps"] if rb in by else 0 for rb in robots]
        viol = [by[rb]["violations"] if rb in by else 0 for rb in robots]
        axes[0].bar(xs, steps, w, label=f"{hz:g} Hz")
        for x, s, v in zip(xs, steps, viol):
            axes[0].text(x, s, f"{v} viol.", ha="center", va="bottom", fontsize=7)
        axes[1].bar(xs, [by[rb]["steps_per_s"] if rb in by else 0 for rb in robots], w, label=f"{hz:g} Hz")
    for ax, lab in ((axes[0], "hostile steps (label: oracle violations)"), (axes[1], "steps per second")):
        ax.set_xticks(range(len(robots)), [f"{rb} ({next(r['joints'] for r in rows if r['robot'] == rb)} j)"
                                           for rb in robots], fontsize=8)
        ax.set_ylabel(lab)
        ax.legend(fontsize=7)
    fig.suptitle(f"omni-vla bench safety --fuzz: {d['total_steps']} steps, {d['total_violations']} violations",
                 fontsize=10)
    _save(fig, out)


def plot_lerobot_act(d: dict, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(12, 5))
    _per_task(ax, d["runs"], "imported LeRobot ACT, reported seeds, per checkpoint / backend / strategy")
    _save(fig, out)


def plot_smolvla_import(d: dict, out: Path) -> None:
    """The benchmark's own plot (benchmarks/smolvla_import/report.py), so there is one way to draw it."""
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "smolvla_import" / "report.py"
    spec = importlib.util.spec_from_file_location("smolvla_import_report", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.plot(d, out)
    plt.close("all")


def plot_served(d: dict, out: Path) -> None:
    """Success per task, LeRobot-served against imported on each runtime (same seeds), one panel per policy, with
    the per-step agreement and the reference policy on the same seeds (benchmarks/lerobot_served)."""
    policies = d["policies"]
    fig, axes = plt.subplots(len(policies), 1, figsize=(12, 4.5 * len(policies)), squeeze=False)
    for ax, p in zip(axes[:, 0], policies):
        agree = ", ".join(f"{b}: {a['snr_db_delta']:.1f} dB over {a['chunks']} chunks, "
                          f"{a['episodes_alike']}/{a['episodes']} episodes alike" for b, a in p["agreement"].items())
        runs = p["runs"] + ([d["reference"]] if d.get("reference") else [])
        _per_task(ax, runs, f"{p['policy']}: {d['what']}\nper-step agreement (chunk minus joint state, SNR): {agree}")
    _save(fig, out)


def _save(fig, out: Path) -> None:  # noqa: ANN001
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


PLOTS = {
    "reported_seeds.json": plot_reported_seeds,
    "one_hour/validation.json": plot_runs_overall,
    "loop_settings.json": plot_loop_settings,
    "bench_runtime.json": plot_bench_runtime,
    "vla/stages.json": plot_vla_stages,
    "vla_loop/graphs.json": plot_vla_loop,
    "launch_cold_start/cold_start.json": plot_cold_start,
    "safety/fuzz_1e6.json": plot_fuzz,
    "lerobot_act/summary.json": plot_lerobot_act,
    "smolvla_import/stages.json": plot_smolvla_import,
    "ros/shutdown.json": plot_shutdown,
    "ros/soak_1h.json": plot_soak,
    "ros/soak_smolvla.json": plot_soak_runs,
    "soak_loop.json": plot_loop_soak,
    "lerobot_served/served.json": plot_served,
}


def png_for(json_path: Path) -> Path:
    return json_path.with_suffix(".png")


def make(results: Path, only: list[str] | None = None) -> list[Path]:
    written = []
    for rel, fn in PLOTS.items():
        if only and rel not in only:
            continue
        src = results / rel
        out = png_for(src)
        fn(json.loads(src.read_text()), out)
        written.append(out)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parents[2] / "results")
    ap.add_argument("--only", nargs="*", help="JSON paths relative to --results (default: every plot)")
    a = ap.parse_args()
    for p in make(a.results, a.only):
        print(p, p.stat().st_size)


if __name__ == "__main__":
    main()
