"""Joint limits from robot descriptions (URDF, MJCF), parsed with the stdlib XML parser.

The supervisor must not import mujoco or a URDF library: it has to keep running when
those stacks are broken, so it reads the few attributes it needs itself.
URDF (as ros2_control's joint_limits_urdf.hpp): <limit lower upper velocity effort>,
<safety_controller soft_lower_limit soft_upper_limit k_position k_velocity>.
MJCF: joint range (degrees unless <compiler angle="radian">), position-actuator
ctrlrange (never angle-converted by MuJoCo), velocity-actuator ctrlrange, forcerange.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

from omni_vla_safety.limits import JointLimitSet, LimitsError, limit_set_from_fields


def parse_xml_limits(text: str, source: str) -> dict[str, JointLimitSet]:
    """Dispatch on the root element: <robot> is URDF, <mujoco> is MJCF."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise LimitsError(f"{source}: not valid XML: {exc}") from exc
    if root.tag == "robot":
        return parse_urdf_limits(root, source)
    if root.tag == "mujoco":
        return parse_mjcf_limits(root, source)
    raise LimitsError(f"{source}: root element <{root.tag}> is neither <robot> (URDF) nor <mujoco> (MJCF)")


def _float(elem: ET.Element, attr: str, joint: str, source: str, default: float | None = None) -> float:
    raw = elem.get(attr)
    if raw is None:
        if default is None:
            raise LimitsError(f"{source}: joint '{joint}': <{elem.tag}> attribute '{attr}' is missing")
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise LimitsError(f"{source}: joint '{joint}': <{elem.tag}> attribute '{attr}'={raw!r} "
                          "is not a number") from exc


def _floats(raw: str, n: int, what: str, joint: str, source: str) -> list[float]:
    try:
        values = [float(v) for v in raw.split()]
    except ValueError as exc:
        raise LimitsError(f"{source}: joint '{joint}': {what}={raw!r} is not numeric") from exc
    if len(values) != n:
        raise LimitsError(f"{source}: joint '{joint}': {what}={raw!r} needs {n} numbers")
    return values


def parse_urdf_limits(root: ET.Element, source: str) -> dict[str, JointLimitSet]:
    """Limits of every revolute, prismatic and continuous joint of a URDF <robot>."""
    out: dict[str, JointLimitSet] = {}
    for joint in root.iter("joint"):
        name, kind = joint.get("name", ""), joint.get("type", "")
        if kind not in ("revolute", "prismatic", "continuous"):
            continue
        fields: dict[str, Any] = {}
        limit = joint.find("limit")
        if limit is None and kind != "continuous":
            raise LimitsError(f"{source}: joint '{name}': a {kind} joint needs a <limit> element")
        if limit is not None:
            if kind != "continuous":
                fields.update(has_position_limits=True,
                              min_position=_float(limit, "lower", name, source, 0.0),
                              max_position=_float(limit, "upper", name, source, 0.0))
            velocity = _float(limit, "velocity", name, source)
            effort = _float(limit, "effort", name, source)
            if velocity > 0:
                fields.update(has_velocity_limits=True, max_velocity=velocity)
            if effort > 0:
                fields.update(has_effort_limits=True, max_effort=effort)
        safety = joint.find("safety_controller")
        if safety is not None:
            fields.update(has_soft_limits=True,
                          soft_lower_limit=_float(safety, "soft_lower_limit", name, source, 0.0),
                          soft_upper_limit=_float(safety, "soft_upper_limit", name, source, 0.0),
                          k_position=_float(safety, "k_position", name, source, 0.0),
                          k_velocity=_float(safety, "k_velocity", name, source))
        out[name] = limit_set_from_fields(name, fields, source)
    return out


class _MjcfDefaults:
    """MJCF default classes: class name -> {element tag -> attributes}, inheritance resolved."""

    def __init__(self, root: ET.Element) -> None:
        self.classes: dict[str, dict[str, dict[str, str]]] = {}
        for top in root.findall("default"):
            self._walk(top, {})

    def _walk(self, elem: ET.Element, inherited: dict[str, dict[str, str]]) -> None:
        own = {tag: dict(attrs) for tag, attrs in inherited.items()}
        for child in elem:
            if child.tag != "default":
                own.setdefault(child.tag, {}).update(child.attrib)
        self.classes[elem.get("class", "main")] = own
        for child in elem.findall("default"):
            self._walk(child, own)

    def attrs(self, tag: str, cls: str, elem: ET.Element) -> dict[str, str]:
        merged = dict(self.classes.get(cls, {}).get(tag, {}))
        merged.update(elem.attrib)
        return merged


def _is_limited(attrs: dict[str, str], flag: str, range_key: str, autolimits: bool) -> bool:
    value = attrs.get(flag, "auto")
    if value == "auto":
        return autolimits and range_key in attrs
    return value == "true"


def parse_mjcf_limits(root: ET.Element, source: str) -> dict[str, JointLimitSet]:
    """Limits of every hinge and slide joint of an MJCF <mujoco> model."""
    compiler = root.find("compiler")
    degrees = compiler is None or compiler.get("angle", "degree") != "radian"
    autolimits = compiler is None or compiler.get("autolimits", "true") == "true"
    defaults = _MjcfDefaults(root)
    fields_by_joint: dict[str, dict[str, Any]] = {}

    def visit(body: ET.Element, childclass: str) -> None:
        childclass = body.get("childclass", childclass)
        for elem in body:
            if elem.tag == "joint":
                attrs = defaults.attrs("joint", elem.get("class", childclass), elem)
                name = attrs.get("name", "")
                kind = attrs.get("type", "hinge")
                if kind not in ("hinge", "slide"):
                    continue
                fields: dict[str, Any] = {}
                if _is_limited(attrs, "limited", "range", autolimits):
                    lo, hi = _floats(attrs.get("range", "0 0"), 2, "range", name, source)
                    if kind == "hinge" and degrees:
                        lo, hi = math.radians(lo), math.radians(hi)
                    fields.update(has_position_limits=True, min_position=lo, max_position=hi)
                if _is_limited(attrs, "actuatorfrclimited", "actuatorfrcrange", autolimits):
                    lo, hi = _floats(attrs["actuatorfrcrange"], 2, "actuatorfrcrange", name, source)
                    fields.update(has_effort_limits=True, max_effort=max(abs(lo), abs(hi)))
                fields_by_joint[name] = fields
            elif elem.tag in ("body", "frame"):
                visit(elem, childclass)

    for world in root.findall("worldbody"):
        visit(world, "main")
    for actuators in root.findall("actuator"):
        for act in actuators:
            attrs = defaults.attrs(act.tag, act.get("class", "main"), act)
            joint = attrs.get("joint")
            if joint is None:
                continue
            if joint not in fields_by_joint:
                raise LimitsError(f"{source}: actuator '{attrs.get('name', act.tag)}' drives unknown joint '{joint}'")
            _apply_actuator(act.tag, attrs, fields_by_joint[joint], joint, source, autolimits)
    return {name: limit_set_from_fields(name, fields, source) for name, fields in fields_by_joint.items()}


def _apply_actuator(tag: str, attrs: dict[str, str], fields: dict[str, Any], joint: str, source: str,
                    autolimits: bool) -> None:
    """ctrlrange of a position servo narrows the position range; of a velocity servo, the speed."""
    if _is_limited(attrs, "ctrllimited", "ctrlrange", autolimits):
        lo, hi = _floats(attrs["ctrlrange"], 2, "ctrlrange", joint, source)
        if tag == "position":
            if fields.get("has_position_limits"):
                lo, hi = max(lo, fields["min_position"]), min(hi, fields["max_position"])
            fields.update(has_position_limits=True, min_position=lo, max_position=hi)
        elif tag == "velocity":
            fields.update(has_velocity_limits=True, max_velocity=min(abs(lo), abs(hi)))
        elif tag == "motor":
            gear_text = attrs.get("gear", "1").split()[:1] or ["1"]
            gear = _floats(gear_text[0], 1, "gear", joint, source)[0]
            _narrow_effort(fields, max(abs(lo), abs(hi)) * abs(gear))
    if _is_limited(attrs, "forcelimited", "forcerange", autolimits):
        lo, hi = _floats(attrs["forcerange"], 2, "forcerange", joint, source)
        _narrow_effort(fields, max(abs(lo), abs(hi)))


def _narrow_effort(fields: dict[str, Any], effort: float) -> None:
    if effort <= 0:
        return
    if fields.get("has_effort_limits"):
        effort = min(effort, fields["max_effort"])
    fields.update(has_effort_limits=True, max_effort=effort)
