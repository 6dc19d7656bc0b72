"""`omni-vla eval --compare backends|chunking`: several evaluation variants in one command, one table.

A comparison is only as good as its pairing: every variant runs the same tasks on the same seeds
with the same settings except the one field being compared, so differences are the variant's.
Backends must agree within their 95% Wilson intervals (they compute the same policy); chunking
strategies are compared by success and smoothness at each simulated inference delay.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Literal

from omni_vla.backends import LOOP_BACKENDS
from omni_vla.core.chunking import STRATEGIES
from omni_vla.runtime.registry import runnable_backends
from omni_vla_sim.report import write_atomic

Kind = Literal["backends", "chunking"]
DELAYS = (0, 1, 2, 4)  # 1: vla_node's own delay (MNN p95 under one 50 ms tick at 20 Hz)


def variants(kind: Kind, base: Any) -> dict[str, Any]:
    """Variant name -> EvalSettings, each differing from `base` only in the compared fields."""
    def with_(**update: Any) -> Any:  # re-validated, unlike model_copy
        return type(base).model_validate({**base.model_dump(), **update})

    if kind == "backends":
        names = runnable_backends(base.bundle_dir) if base.bundle_dir is not None else LOOP_BACKENDS
        return {b: with_(backend=b) for b in names}
    if kind == "chunking":
        return {f"{s}_d{d}": with_(strategy=s, delay_ticks=d) for d in DELAYS for s in STRATEGIES}
    raise ValueError(f"unknown comparison {kind!r}; expected 'backends' or 'chunking'")


def intervals_agree(reports: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Per task (and overall): do all variants' 95% intervals share a point?"""
    first = next(iter(reports.values()))
    out = {}
    for task in [*first["tasks"], "overall"]:
        groups = [r["overall"] if task == "overall" else r["tasks"][task] for r in reports.values()]
        out[task] = max(g["ci95"][0] for g in groups) <= min(g["ci95"][1] for g in groups)
    return out


def summary_row(report: dict[str, Any]) -> dict[str, Any]:
    o = report["overall"]
    return {
        "rate": o["rate"], "ci95": o["ci95"], "successes": o["successes"], "episodes": o["episodes"],
        "per_task": {t: g["rate"] for t, g in report["tasks"].items()},
        "jerk_mean": o["jerk_mean"], "jerk_p99": o["jerk_p99"], "boundary_jump_mean": o["boundary_jump_mean"],
        "interventions_per_episode": o["interventions_per_episode"], "latency_ms": o["latency_ms"],
        "wall_time_s": report["wall_time_s"],
    }


def compare(kind: Kind, base: Any, run: Callable[[Any, Path | None], dict[str, Any]],
            out: Path | None = None) -> dict[str, Any]:
    """Run every variant through `run(settings, out_dir)` and gather the comparison."""
    reports = {name: run(s, out / name if out else None) for name, s in variants(kind, base).items()}
    result: dict[str, Any] = {"kind": kind, "variants": {n: summary_row(r) for n, r in reports.items()},
                              "seeds": reports[next(iter(reports))]["overall"]["seeds"],
                              "settings": json.loads(base.model_dump_json())}
    if kind == "backends":
        result["agree_within_ci95"] = intervals_agree(reports)
        result["agree"] = all(result["agree_within_ci95"].values())
    if out is not None:
        write_comparison(out, result)
    return result


def write_comparison(out: Path, result: dict[str, Any]) -> None:
    """comparison.json and comparison.md, atomically."""
    write_atomic(out / "comparison.json", json.dumps(result, indent=2))
    first = next(iter(result["variants"].values()))
    tasks = list(first["per_task"])
    lines = [f"# omni_vla evaluation: {result['kind']} comparison", "",
             f"Same seeds for every variant ({len(result['seeds'])} per task).", "",
             "| variant | k/n | success | 95% CI | " + " | ".join(tasks)
             + " | jerk mean | jerk p99 | boundary jump | interventions/ep |",
             "|---|---|---|---|" + "---|" * len(tasks) + "---|---|---|---|"]
    for name, v in result["variants"].items():
        lines.append(
            f"| {name} | {v['successes']}/{v['episodes']} | {100 * v['rate']:.1f}% | "
            f"[{100 * v['ci95'][0]:.1f}, {100 * v['ci95'][1]:.1f}] | "
            + " | ".join(f"{100 * v['per_task'][t]:.0f}%" for t in tasks)
            + f" | {v['jerk_mean']:.1f} | {v['jerk_p99']:.1f} | {v['boundary_jump_mean']:.4f} | "
            f"{v['interventions_per_episode']:.1f} |")
    if "agree" in result:
        lines += ["", f"Backends agree within 95% intervals: **{result['agree']}** "
                  f"(per task: `{json.dumps(result['agree_within_ci95'])}`)"]
    write_atomic(out / "comparison.md", "\n".join(lines) + "\n")
