"""`omni-vla limits FILE [--overlay YAML] [--joints a,b] [--json]`: what the supervisor would enforce.

A robot integrator points it at a URDF, MJCF or joint_limits YAML before the supervisor ever
runs: every limit is shown with where it came from (file:line and element, overlay, or
"missing"), and the exit code says whether the supervisor would accept it (0) or refuse it (2).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from omni_vla_safety.limits import (
    REQUIRED, JointLimitSet, JointSource, LimitsError, describe_limits, enforcement_problem,
)

COLUMNS = ("position", "velocity", "acceleration", "effort")


def _value(spec: JointLimitSet, group: str) -> Any:
    hard = spec.hard
    if not getattr(hard, f"has_{group}_limits"):
        return None
    if group == "position":
        return [hard.min_position, hard.max_position]
    return getattr(hard, f"max_{group}")


def build_table(sources: dict[str, JointSource], sets: dict[str, JointLimitSet],
                joints: list[str] | None) -> list[dict[str, Any]]:
    """One row per joint of the file (and per requested joint it lacks), enforced ones flagged."""
    enforced = joints if joints is not None else [j for j, js in sources.items() if not js.follows]
    rows = []
    for joint in list(sources) + [j for j in enforced if j not in sources]:
        js, spec = sources.get(joint), sets.get(joint)
        row: dict[str, Any] = {"joint": joint, "kind": js.kind if js else "", "follows": js.follows if js else "",
                               "note": js.note if js else "", "enforced": joint in enforced, "limits": {}}
        for group in COLUMNS + (("soft",) if spec is not None and spec.soft is not None else ()):
            value = None if spec is None else (
                list(spec.position_range) if group == "soft" else _value(spec, group))
            row["limits"][group] = {"value": value,
                                    "source": (js.origin.get(group, "missing") if js and value is not None
                                               else "missing")}
        row["problem"] = enforcement_problem(joint, js, spec) if joint in enforced else ""
        row["missing"] = ([g for g in REQUIRED if row["limits"][g]["value"] is None]
                          if joint in enforced else [])
        rows.append(row)
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.6g}" for v in value) + "]"
    return f"{value:.6g}" if math.isfinite(value) else str(value)


def render(rows: list[dict[str, Any]], source: str) -> str:
    """The table as text: values per joint, then each limit's origin, then the verdict."""
    width = max([len(r["joint"]) for r in rows] + [5])
    lines = [f"limits: {source}",
             f"{'joint':<{width}}  {'kind':<10} {'enf':<3} " + " ".join(f"{c:<22}" for c in COLUMNS)]
    for r in rows:
        enf = "yes" if r["enforced"] else "no"
        lines.append(f"{r['joint']:<{width}}  {r['kind']:<10} {enf:<3} "
                     + " ".join(f"{_fmt(r['limits'][c]['value']):<22}" for c in COLUMNS))
        if r["note"]:
            lines.append(f"    note: {r['note']}")
        for group, cell in r["limits"].items():
            lines.append(f"    {group}: {cell['source']}")
    problems = [r["problem"] for r in rows if r["problem"]]
    if problems:
        lines.append(f"supervisor would REFUSE this ({len(problems)} enforced joint(s) not enforceable):")
        lines += [f"  {p}" for p in problems]
        lines.append("  (complete missing limits with --overlay, a ros2_control joint_limits YAML)")
    else:
        lines.append(f"supervisor would accept this: {sum(r['enforced'] for r in rows)} enforced joint(s) "
                     "have position, velocity and acceleration limits")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omni-vla limits", description=__doc__.splitlines()[0])
    parser.add_argument("file", help="URDF, MJCF or ros2_control joint_limits YAML")
    parser.add_argument("--overlay", help="joint_limits YAML whose fields complete or override the file")
    parser.add_argument("--joints", help="comma-separated joints the supervisor enforces "
                                         "(default: every joint that follows no other)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    joints = [j.strip() for j in args.joints.split(",") if j.strip()] if args.joints else None
    try:
        sources, sets, source = describe_limits(args.file, args.overlay)
    except LimitsError as exc:
        print(f"omni-vla limits: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    rows = build_table(sources, sets, joints)
    ok = not any(r["problem"] for r in rows)
    if args.json:
        print(json.dumps({"source": source, "accepted": ok, "joints": rows}, indent=1,
                         default=lambda v: None))
    else:
        print(render(rows, source))
    return 0 if ok else 2
