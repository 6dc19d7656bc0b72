"""Joint limits from files: ros2_control joint_limits YAML (with line numbers), URDF and MJCF (limits_sources),
overlays, and the fail-closed check of what the supervisor enforces. The models live in limit_models.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from omni_vla_safety.limit_models import (  # re-exported: callers import the models from here too
    SOFT_KEYS, JointLimits, JointLimitSet, JointSource, LimitsError, SoftJointLimits, _field_group,
    limit_set_from_fields,
)
from omni_vla_safety.limits_sources import parse_xml_sources

def _joint_limits_mapping(data: Any, source: str) -> Mapping[str, Any]:
    """Accept the flat `joint_limits:` form and `<node>: ros__parameters: joint_limits:`."""
    if isinstance(data, dict) and isinstance(data.get("joint_limits"), dict):
        return data["joint_limits"]
    found: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(data, dict):
        for node, body in data.items():
            params = body.get("ros__parameters") if isinstance(body, dict) else None
            if isinstance(params, dict) and isinstance(params.get("joint_limits"), dict):
                found.append((str(node), params["joint_limits"]))
    if len(found) == 1:
        return found[0][1]
    if len(found) > 1:
        raise LimitsError(f"{source}: several nodes define joint_limits ({', '.join(n for n, _ in found)}); "
                          "keep one")
    raise LimitsError(f"{source}: expected a mapping with key 'joint_limits' (flat, or under "
                      "<node>: ros__parameters:)")


def _yaml_lines(text: str) -> dict[tuple[str, str], int]:
    """(joint, field) -> 1-based line of every field under a `joint_limits:` mapping, for provenance."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[tuple[str, str], int] = {}
    stack = [node]
    while stack:
        current = stack.pop()
        if not isinstance(current, yaml.MappingNode):
            continue
        for key, value in current.value:
            if key.value == "joint_limits" and isinstance(value, yaml.MappingNode):
                for joint, body in value.value:
                    if isinstance(body, yaml.MappingNode):
                        for fkey, _ in body.value:
                            lines[(str(joint.value), str(fkey.value))] = fkey.start_mark.line + 1
            stack.append(value)
    return lines


def _yaml_mapping(text: str, source: str) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise LimitsError(f"{source}: not valid YAML: {exc}") from exc
    mapping = _joint_limits_mapping(data, source)
    for joint, fields in mapping.items():
        if fields is not None and not isinstance(fields, dict):
            raise LimitsError(f"{source}: joint '{joint}': expected a mapping of limit fields, got {fields!r}")
    return mapping


def yaml_sources(text: str, source: str) -> dict[str, JointSource]:
    """joint_limits YAML as JointSources, each limit traced to its file line."""
    lines = _yaml_lines(text)
    name = Path(source).name
    out: dict[str, JointSource] = {}
    for joint, fields in _yaml_mapping(text, source).items():
        js = JointSource(kind="yaml")
        for key, value in (fields or {}).items():
            line = lines.get((str(joint), str(key)), 0)
            js.set(str(key), value, _field_group(str(key)), f"{name}:{line} joint_limits.{joint}.{key}")
        out[str(joint)] = js
    return out


def parse_joint_limits_yaml(text: str, source: str = "<yaml>") -> dict[str, JointLimitSet]:
    """Parse ros2_control joint_limits YAML text into validated per-joint limit sets."""
    return {joint: limit_set_from_fields(joint, fields, source)
            for joint, fields in _yaml_mapping(text, source).items()}


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise LimitsError(f"{path}: cannot read {what}: {exc}") from exc


def load_sources(path: str | Path) -> dict[str, JointSource]:
    """Unvalidated joint sources of a joint_limits YAML, URDF or MJCF file (chosen by content)."""
    path = Path(path)
    text = _read(path, "limits file")
    if text.lstrip().startswith("<"):
        return parse_xml_sources(text, str(path))
    return yaml_sources(text, str(path))


def load_limit_sets(path: str | Path) -> dict[str, JointLimitSet]:
    """Load hard+soft limits from a joint_limits YAML, a URDF or an MJCF file (chosen by content)."""
    return {joint: limit_set_from_fields(joint, js.fields, str(path)) for joint, js in load_sources(path).items()}


def load_joint_limits(path: str | Path) -> dict[str, JointLimits]:
    """Read a limits file (joint_limits YAML, URDF or MJCF), joint name -> hard limits."""
    return {joint: spec.hard for joint, spec in load_limit_sets(path).items()}


def require_joints(limits: Mapping[str, JointLimitSet], joint_names: Iterable[str],
                   source: str) -> list[JointLimitSet]:
    """Limits in `joint_names` order; a joint without an entry is refused, not left unlimited."""
    ordered = []
    for joint in joint_names:
        if joint not in limits:
            raise LimitsError(f"{source}: joint '{joint}' has no entry (add joint_limits.{joint}, "
                              "e.g. in a joint_limits overlay)")
        ordered.append(limits[joint])
    return ordered


# Limits the limiter cannot run without: missing one is an error, never an infinite limit.
REQUIRED = ("position", "velocity", "acceleration")


def overlay_sources(base: Mapping[str, JointSource], overlay_path: str | Path) -> dict[str, JointSource]:
    """Fields of a joint_limits YAML overlay complete or override the base sources, joint by joint."""
    path = Path(overlay_path)
    over = yaml_sources(_read(path, "limits overlay"), str(path))
    merged = {joint: JointSource(dict(js.fields), dict(js.origin), js.kind, js.follows, js.note)
              for joint, js in base.items()}
    for joint, extra in over.items():
        target = merged.setdefault(joint, JointSource(kind="overlay"))
        for key, value in extra.fields.items():
            group = _field_group(key)
            target.set(key, value, group, f"overlay {extra.origin[group]}")
    return merged


def _fields_of(spec: JointLimitSet) -> dict[str, Any]:
    fields = spec.hard.model_dump()
    if spec.soft is not None:
        fields.update(has_soft_limits=True, soft_lower_limit=spec.soft.min_position,
                      soft_upper_limit=spec.soft.max_position,
                      k_position=spec.soft.k_position, k_velocity=spec.soft.k_velocity)
    return fields


def merge_overlay(base: Mapping[str, JointLimitSet], overlay_path: str | Path) -> dict[str, JointLimitSet]:
    """Fields of a joint_limits YAML overlay complete or override the base limits, joint by joint."""
    sources = overlay_sources({j: JointSource(_fields_of(s)) for j, s in base.items()}, overlay_path)
    return {joint: limit_set_from_fields(joint, js.fields, f"{overlay_path} over base limits")
            for joint, js in sources.items()}


def missing_limits(spec: JointLimitSet) -> list[str]:
    """The required limits this joint lacks (see REQUIRED), as field names."""
    hard = spec.hard
    return [f"has_{name}_limits" for name in REQUIRED if not getattr(hard, f"has_{name}_limits")]


def enforcement_problem(joint: str, js: JointSource | None, spec: JointLimitSet | None) -> str:
    """Why the supervisor cannot enforce this joint ('' when it can)."""
    if js is None or spec is None:
        return f"joint '{joint}' has no entry"
    if js.follows:
        return (f"joint '{joint}' follows '{js.follows}' ({js.note}); command '{js.follows}' "
                "and drop this joint from joint_names")
    missing = [name for name in REQUIRED if not getattr(spec.hard, f"has_{name}_limits")]
    if not missing:
        return ""
    why = " (continuous joint)" if "position" in missing and spec.hard.angle_wraparound else ""
    names = " and ".join(missing) if len(missing) < 3 else "position, velocity and acceleration"
    fields = ", ".join(f"has_{m}_limits" for m in missing)
    return f"joint '{joint}' is missing {names} limit{'s' if len(missing) > 1 else ''}{why} ({fields})"


def describe_limits(path: str | Path, overlay: str | Path | None = None
                    ) -> tuple[dict[str, JointSource], dict[str, JointLimitSet], str]:
    """(sources with provenance, validated limit sets, source label) of a file plus an optional overlay."""
    sources = load_sources(path)
    source = str(path)
    if overlay:
        sources = overlay_sources(sources, overlay)
        source = f"{path} + {overlay}"
    sets = {joint: limit_set_from_fields(joint, js.fields, source) for joint, js in sources.items()}
    return sources, sets, source


def load_enforced_limits(path: str | Path, joint_names: Iterable[str],
                         overlay: str | Path | None = None) -> list[JointLimitSet]:
    """Limits in joint order for the supervisor: file, then overlay; a joint missing a required limit,
    absent, or following another joint (mimic/coupled) is refused with one line naming it."""
    sources, sets, source = describe_limits(path, overlay)
    names = list(joint_names)
    for joint in names:
        problem = enforcement_problem(joint, sources.get(joint), sets.get(joint))
        if problem:
            raise LimitsError(f"{source}: {problem}; supply it in a joint_limits overlay "
                              "(the supervisor enforces position, velocity and acceleration limits)"
                              if "follows" not in problem else f"{source}: {problem}")
    return [sets[joint] for joint in names]
