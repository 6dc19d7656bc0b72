"""Evaluation reports: per-task Wilson intervals, smoothness and latency, as JSON, Markdown and plots."""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval: honest at small n and at 0% / 100%, unlike the normal approximation.

    No episodes, no interval: (nan, nan), never a [0, 1] that reads like a measured result."""
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} successes out of {n} episodes")
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # The bounds at 0% and 100% are exactly 0 and 1 (the formula can miss 1 by a rounding error).
    return (0.0 if successes == 0 else centre - half, 1.0 if successes == n else centre + half)


@dataclass
class EpisodeResult:
    """Everything one episode reports; a pure function of its spec, so runs are comparable."""

    task: str
    seed: int
    instruction: str
    held_out: bool
    success: bool
    steps: int
    interventions: int = 0
    interventions_by_kind: dict[str, int] = field(default_factory=dict)
    # The supervisor's split of its limiter interventions (omni_vla_safety.supervisor): routine
    # shaping within shaping_tolerance of the requested motion, and real clamps.
    shaping: int = 0
    clamps: int = 0
    clamps_by_kind: dict[str, int] = field(default_factory=dict)
    holds: int = 0
    cloud_plans: int = 0
    # None: not measured by this runner (the ROS demo knows no chunk boundaries), left out of the report.
    jerk_mean: float | None = None
    jerk_p99: float | None = None
    boundary_jump_mean: float | None = None
    latency_ms: list[float] = field(default_factory=list)
    # vla_node's own loop figures at the episode's end (the ROS demo): LOOP_FIGURES keys.
    loop: dict[str, float] = field(default_factory=dict)
    actions: list[list[float]] | None = None
    video: str | None = None
    frames: str | None = None

    def key(self) -> tuple[str, int, str]:
        return (self.task, self.seed, self.instruction)


def smoothness(actions: np.ndarray, dt: float, boundaries: Iterable[int]) -> dict[str, float]:
    """Jerk of the commanded joint targets (third difference / dt^3) and the step at chunk boundaries."""
    out = {"jerk_mean": 0.0, "jerk_p99": 0.0, "boundary_jump_mean": 0.0}
    if len(actions) >= 4:
        jerk = np.linalg.norm(np.diff(actions[:, :7], n=3, axis=0), axis=1) / dt**3
        out["jerk_mean"], out["jerk_p99"] = float(jerk.mean()), float(np.percentile(jerk, 99))
    jumps = []
    for b in boundaries:
        if 2 <= b < len(actions):
            # Deviation from constant velocity across the boundary: 0 for a seamless splice.
            jumps.append(float(np.linalg.norm(actions[b, :7] - 2 * actions[b - 1, :7] + actions[b - 2, :7])))
    if jumps:
        out["boundary_jump_mean"] = float(np.mean(jumps))
    return out


# vla_node's diagnostics keys a report carries per episode; a group reports the median of the p50s and the worst of
# the rest (a tail figure averaged over episodes would hide the one episode that stalled).
LOOP_FIGURES = ("inference_latency_p50_ms", "inference_latency_p95_ms", "tick_lateness_p99_ms", "missed_ticks",
                "starved_ticks", "splice_jump_p95")


def _measured_mean(values: list[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return float(np.mean(measured)) if measured else None


def _loop(results: list[EpisodeResult]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in LOOP_FIGURES:
        values = [r.loop[key] for r in results if key in r.loop]
        if values:
            out[key] = float(np.median(values)) if key.endswith("_p50_ms") else float(max(values))
    return out


def _group(results: list[EpisodeResult]) -> dict[str, Any]:
    """An empty group (e.g. trained instructions in a --held-out run) reports NaN rates and means, not 0; a figure
    no episode measured is None."""
    n = len(results)
    k = sum(r.success for r in results)
    lo, hi = wilson(k, n)
    lat = [v for r in results for v in r.latency_ms]
    return {
        "successes": k, "episodes": n, "rate": k / n if n else math.nan, "ci95": [round(lo, 4), round(hi, 4)],
        "seeds": sorted({r.seed for r in results}),
        "cloud_plans_per_episode": float(np.mean([r.cloud_plans for r in results])) if n else math.nan,
        "mean_episode_length": float(np.mean([r.steps for r in results])) if n else math.nan,
        "interventions_per_episode": float(np.mean([r.interventions for r in results])) if n else math.nan,
        "shaping_per_episode": float(np.mean([r.shaping for r in results])) if n else math.nan,
        "clamps_per_episode": float(np.mean([r.clamps for r in results])) if n else math.nan,
        "clamps_by_kind_per_episode": {
            kind: sum(r.clamps_by_kind.get(kind, 0) for r in results) / n
            for kind in sorted({k for r in results for k in r.clamps_by_kind})
        } if n else {},
        "interventions_by_kind_per_episode": {
            kind: sum(r.interventions_by_kind.get(kind, 0) for r in results) / n
            for kind in sorted({k for r in results for k in r.interventions_by_kind})
        } if n else {},
        "jerk_mean": _measured_mean([r.jerk_mean for r in results]) if n else math.nan,
        "jerk_p99": _measured_mean([r.jerk_p99 for r in results]) if n else math.nan,
        "boundary_jump_mean": _measured_mean([r.boundary_jump_mean for r in results]) if n else math.nan,
        "latency_ms": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99))} if lat else None,
        "loop": _loop(results),
    }


def summarise(results: list[EpisodeResult], versions: dict[str, Any], settings: dict[str, Any],
              wall_time_s: float) -> dict[str, Any]:
    """The report dict (keys per INTERFACES.md: tasks, overall, versions)."""
    results = sorted(results, key=EpisodeResult.key)
    tasks = sorted({r.task for r in results})
    report: dict[str, Any] = {
        "tasks": {t: _group([r for r in results if r.task == t]) for t in tasks},
        "overall": _group(results),
        "versions": versions,
        "settings": settings,
        "wall_time_s": round(wall_time_s, 2),
    }
    held = [r for r in results if r.held_out]
    if held:
        report["held_out_instructions"] = _group(held)
        report["trained_instructions"] = _group([r for r in results if not r.held_out])
    return report


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The part of a report that must not depend on workers, machines or wall time."""
    strip = {"wall_time_s", "versions", "settings", "latency_ms", "loop"}

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in strip}
        return value

    return clean(report)


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """Success (overall and per task) and what the supervisor changed: one line of a settings sweep."""
    o = report["overall"]
    return {"successes": o["successes"], "episodes": o["episodes"],
            "per_task": {t: v["successes"] for t, v in report["tasks"].items()},
            "shaping_per_episode": o["shaping_per_episode"], "clamps_per_episode": o["clamps_per_episode"],
            "clamps_by_kind_per_episode": o["clamps_by_kind_per_episode"], "jerk_mean": o["jerk_mean"]}


def write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def _fmt(value: Any, spec: str) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _latency(g: dict[str, Any]) -> str | None:
    lat = g["latency_ms"]
    return f"{lat['p50']:.2f} / {lat['p99']:.2f}" if lat else None


def _loop_pair(g: dict[str, Any], a: str, b: str) -> str | None:
    loop = g["loop"]
    return f"{loop[a]:.1f} / {loop[b]:.1f}" if a in loop and b in loop else None


# Report table columns: header and the cell of a group; a column no group measured is left out.
COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str | None]], ...] = (
    ("k/n", lambda g: f"{g['successes']}/{g['episodes']}"),
    ("success", lambda g: None if math.isnan(g["rate"]) else f"{100 * g['rate']:.1f}%"),
    ("95% CI", lambda g: None if math.isnan(g["ci95"][0]) else f"[{100 * g['ci95'][0]:.1f}, {100 * g['ci95'][1]:.1f}]"),
    ("mean length", lambda g: _fmt(g["mean_episode_length"], ".1f")),
    ("interventions/ep", lambda g: _fmt(g["interventions_per_episode"], ".2f")),
    ("shaping/ep", lambda g: _fmt(g["shaping_per_episode"], ".2f")),
    ("clamps/ep", lambda g: _fmt(g["clamps_per_episode"], ".2f")),
    ("jerk mean", lambda g: _fmt(g["jerk_mean"], ".1f")),
    ("jerk p99", lambda g: _fmt(g["jerk_p99"], ".1f")),
    ("boundary jump", lambda g: _fmt(g["boundary_jump_mean"], ".4f")),
    ("latency p50/p99 ms", _latency),
    ("inference p50/p95 ms (vla_node)", lambda g: _loop_pair(g, "inference_latency_p50_ms",
                                                              "inference_latency_p95_ms")),
    ("tick lateness p99 ms (vla_node)", lambda g: _fmt(g["loop"].get("tick_lateness_p99_ms"), ".3f")),
    ("missed ticks (vla_node)", lambda g: _fmt(g["loop"].get("missed_ticks"), ".0f")),
    ("starved ticks (vla_node)", lambda g: _fmt(g["loop"].get("starved_ticks"), ".0f")),
)


def _flat(settings: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            rows += _flat(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value if isinstance(value, str) else json.dumps(value, default=str)))
    return rows


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(row) + " |" for row in rows]]


def write_report(out_dir: Path, report: dict[str, Any], results: list[EpisodeResult],
                 title: str = "omni_vla evaluation") -> dict[str, Path]:
    """report.json, episodes.json, report.md and PNG plots, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": write_atomic(out_dir / "report.json", json.dumps(report, indent=2, default=str)),
        "episodes": write_atomic(out_dir / "episodes.json",
                                 json.dumps([asdict(r) for r in results], default=str)),
    }
    plots = _plots(out_dir, report, results)
    groups = [*report["tasks"].items(), ("**overall**", report["overall"])]
    cells = {head: [cell(g) for _, g in groups] for head, cell in COLUMNS}
    shown = [head for head in cells if any(c is not None for c in cells[head])]
    rows = [[name, *[cells[head][i] or "-" for head in shown]] for i, (name, _) in enumerate(groups)]
    lines = [f"# {title}", "", f"Wall time: {report['wall_time_s']} s.", "", *_table(["task", *shown], rows), ""]
    lines += [f"![{name}]({p.name})" for name, p in plots.items()]
    lines += ["", "## Settings", "", *_table(["setting", "value"], [[k, f"`{v}`"] for k, v in _flat(report["settings"])])]
    lines += ["", "## Versions", "", *_table(["component", "version"], [[k, f"`{v}`"] for k, v in _flat(report["versions"])])]
    videos = [r.video for r in results if r.video]
    if videos:
        lines += ["", "## Videos", *[f"- [{Path(v).name}]({Path(v).name})" for v in videos]]
    paths["markdown"] = write_atomic(out_dir / "report.md", "\n".join(lines) + "\n")
    paths.update(plots)
    return paths


def _plots(out_dir: Path, report: dict[str, Any], results: list[EpisodeResult]) -> dict[str, Path]:
    import matplotlib  # optional: ~0.3 s to import, only when a report is written with plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: after matplotlib.use("Agg") (headless backend)

    plots: dict[str, Path] = {}
    names = list(report["tasks"])
    rates = np.array([report["tasks"][t]["rate"] for t in names])
    lo = rates - np.array([report["tasks"][t]["ci95"][0] for t in names])
    hi = np.array([report["tasks"][t]["ci95"][1] for t in names]) - rates
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar(names, 100 * rates, yerr=100 * np.vstack([lo, hi]), capsize=4, color="#4c72b0")
    ax.set_ylabel("success % (95% Wilson)")
    ax.set_ylim(0, 105)
    ax.tick_params(axis="x", labelsize=7)
    plots["success"] = _save(fig, out_dir / "success.png")
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(6, 3))
    for k, (key, label) in enumerate([("shaping_per_episode", "shaping"), ("clamps_per_episode", "clamps"),
                                      ("interventions_per_episode", "all interventions")]):
        ax.bar(x + (k - 1) * 0.27, [report["tasks"][t][key] for t in names], 0.27, label=label)
    ax.set_xticks(x, names, fontsize=7)
    ax.set_ylabel("per episode (supervisor)")
    ax.legend(fontsize=7)
    plots["interventions"] = _save(fig, out_dir / "interventions.png")
    looped = [r for r in results if r.loop]
    if looped:
        fig, ax = plt.subplots(figsize=(6, 3))
        for key in ("inference_latency_p95_ms", "tick_lateness_p99_ms"):
            ax.plot([r.loop.get(key, math.nan) for r in looped], "o-", label=key.replace("_", " "))
        ax.set_xlabel("episode")
        ax.set_ylabel("ms (vla_node)")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.legend(fontsize=7)
        plots["loop"] = _save(fig, out_dir / "loop.png")
    lat = [v for r in results for v in r.latency_ms]
    if lat:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist(lat, bins=40, color="#55a868")
        ax.set_xlabel("inference latency (ms)")
        plots["latency"] = _save(fig, out_dir / "latency.png")
    traced = [r for r in results if r.actions]
    if traced:
        fig, ax = plt.subplots(figsize=(6, 3))
        a = np.asarray(traced[0].actions)
        for j in range(min(7, a.shape[1])):
            ax.plot(a[:, j], lw=1, label=f"j{j + 1}")
        ax.set_xlabel(f"tick ({traced[0].task}, seed {traced[0].seed})")
        ax.set_ylabel("joint target (rad)")
        ax.legend(fontsize=6, ncol=7)
        plots["actions"] = _save(fig, out_dir / "actions.png")
    plots.update({f"frames {Path(r.frames).stem}": Path(r.frames) for r in results if r.frames})
    return plots


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.tight_layout()
    fig.savefig(tmp, dpi=100)
    import matplotlib.pyplot as plt  # optional: loaded by _plots, which made `fig`

    plt.close(fig)
    os.replace(tmp, path)
    return path
