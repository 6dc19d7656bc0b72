"""Joint limits from robot descriptions (URDF, MJCF), parsed with the stdlib XML parser.

The supervisor must not import mujoco or a URDF library: it has to keep running when
those stacks are broken, so it reads the few attributes it needs itself, following the
rules MuJoCo's compiler applies (checked against MuJoCo in tests/safety/test_limits_robots.py):
- MJCF `<include file>` anywhere, recursively; the path is tried relative to the main
  model's directory first, then the including file's; a file included twice is an error.
- `<compiler angle autolimits>` may sit in any included file; the last value of each
  attribute applies to the whole model. Hinge ranges are degrees unless angle="radian";
  ctrlrange is never angle-converted; `inheritrange` takes the (converted) joint range.
- `<default>` classes nest; `class` on an element, `childclass` on bodies and frames;
  all actuator shortcuts of one class share one actuator default, as in MuJoCo.
- A position servo's ctrlrange (divided by its gear) narrows the joint range.
- A joint held to another by `<equality><joint joint1 joint2>` without an actuator of its
  own (joint1 when neither has one, MuJoCo's direction), and a URDF `<mimic>` joint, is
  reported as following the other: the supervisor commands the leader and refuses to
  command the follower, so its limits are shown but not enforced.
- URDF velocity="0" / effort="0" (or absent) mean "not given", never a zero or infinite limit;
  a continuous joint has no position limit and is flagged with angle_wraparound.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.parsers import expat

from omni_vla_safety.limit_models import JointLimitSet, JointSource, LimitsError, limit_set_from_fields

_ACTUATOR_TAGS = ("general", "motor", "position", "velocity", "intvelocity", "damper", "cylinder",
                  "muscle", "adhesion")


class _Tree:
    """An XML tree with every element's file and line, includes expanded in place."""

    def __init__(self) -> None:
        self.where: dict[int, tuple[str, int]] = {}
        self.included: set[Path] = set()

    def parse(self, text: str, source: str) -> ET.Element:
        builder = ET.TreeBuilder()
        parser = expat.ParserCreate()
        name = Path(source).name

        def start(tag: str, attrs: dict[str, str]) -> None:
            self.where[id(builder.start(tag, attrs))] = (name, parser.CurrentLineNumber)

        parser.StartElementHandler = start
        parser.EndElementHandler = builder.end
        parser.CharacterDataHandler = builder.data
        try:
            parser.Parse(text, True)
        except expat.ExpatError as exc:
            raise LimitsError(f"{source}: not valid XML: {exc}") from exc
        return builder.close()

    def at(self, elem: ET.Element, what: str = "") -> str:
        name, line = self.where.get(id(elem), ("?", 0))
        return f"{name}:{line} <{elem.tag}{' ' + what if what else ''}>"

    def expand(self, elem: ET.Element, here: Path, main_dir: Path) -> None:
        """Replace each <include> child by the children of the included file's root."""
        children: list[ET.Element] = []
        for child in elem:
            if child.tag != "include":
                self.expand(child, here, main_dir)
                children.append(child)
                continue
            ref = child.get("file")
            if not ref:
                raise LimitsError(f"{self.at(child)}: attribute 'file' is missing")
            candidates = [main_dir / ref, here.parent / ref]
            path = next((p for p in candidates if p.is_file()), candidates[0]).resolve()
            if path in self.included:
                raise LimitsError(f"{self.at(child, 'file=' + repr(ref))}: {path} already included")
            self.included.add(path)
            try:
                text = path.read_text()
            except OSError as exc:
                raise LimitsError(f"{self.at(child, 'file=' + repr(ref))}: cannot read included file: {exc}") \
                    from exc
            inc_root = self.parse(text, str(path))
            self.expand(inc_root, path, main_dir)
            children.extend(inc_root)
        elem[:] = children


def parse_xml_limits(text: str, source: str) -> dict[str, JointLimitSet]:
    """Validated limits of a URDF or MJCF text; MJCF includes resolve next to `source`."""
    return {name: limit_set_from_fields(name, js.fields, source)
            for name, js in parse_xml_sources(text, source).items()}


def parse_xml_sources(text: str, source: str) -> dict[str, JointSource]:
    """Dispatch on the root element: <robot> is URDF, <mujoco> is MJCF."""
    tree = _Tree()
    root = tree.parse(text, source)
    if root.tag == "robot":
        return _urdf_sources(root, tree, source)
    if root.tag == "mujoco":
        main = Path(source).resolve()
        tree.included.add(main)
        tree.expand(root, main, main.parent)
        return _mjcf_sources(root, tree, source)
    raise LimitsError(f"{source}: root element <{root.tag}> is neither <robot> (URDF) nor <mujoco> (MJCF)")


def _number(raw: str, what: str, joint: str, source: str) -> float:
    try:
        value = float(raw)
    except ValueError as exc:
        raise LimitsError(f"{source}: joint '{joint}': {what}={raw!r} is not a number") from exc
    if not math.isfinite(value):
        raise LimitsError(f"{source}: joint '{joint}': {what}={raw!r} is not finite")
    return value


def _floats(raw: str, n: int, what: str, joint: str, source: str) -> list[float]:
    values = [_number(v, what, joint, source) for v in raw.split()]
    if len(values) < n:
        raise LimitsError(f"{source}: joint '{joint}': {what}={raw!r} needs {n} numbers")
    return values[:n]


def _urdf_sources(root: ET.Element, tree: _Tree, source: str) -> dict[str, JointSource]:
    """Revolute, prismatic and continuous joints of a URDF <robot>; fixed/floating/planar skipped."""
    out: dict[str, JointSource] = {}
    for joint in root.iter("joint"):
        name, kind = joint.get("name", ""), joint.get("type", "")
        if kind not in ("revolute", "prismatic", "continuous"):
            continue
        js = JointSource(kind=kind)
        limit = joint.find("limit")
        if limit is None and kind != "continuous":
            raise LimitsError(f"{source}: joint '{name}': a {kind} joint needs a <limit> element")
        if kind == "continuous":
            js.set("angle_wraparound", True, "position", f"{tree.at(joint, 'type=continuous')}")
            js.note = "continuous: no position limit"
        if limit is not None:
            if kind != "continuous":
                lo = _number(limit.get("lower", "0"), "lower", name, source)
                hi = _number(limit.get("upper", "0"), "upper", name, source)
                js.set_many(dict(has_position_limits=True, min_position=lo, max_position=hi), "position",
                            tree.at(limit, "lower upper"))
            for attr, group in (("velocity", "velocity"), ("effort", "effort")):
                value = _number(limit.get(attr, "0"), attr, name, source)
                if value < 0:
                    raise LimitsError(f"{source}: joint '{name}': <limit {attr}={value}> is negative")
                if value > 0:  # 0 or absent: not given (ros2_control treats it the same way)
                    js.set_many({f"has_{group}_limits": True, f"max_{group}": value}, group,
                                tree.at(limit, attr))
        safety = joint.find("safety_controller")
        if safety is not None:
            js.set_many(dict(has_soft_limits=True,
                             soft_lower_limit=_number(safety.get("soft_lower_limit", "0"), "soft_lower_limit",
                                                      name, source),
                             soft_upper_limit=_number(safety.get("soft_upper_limit", "0"), "soft_upper_limit",
                                                      name, source),
                             k_position=_number(safety.get("k_position", "0"), "k_position", name, source),
                             k_velocity=_number(safety.get("k_velocity", "0"), "k_velocity", name, source)),
                        "soft", tree.at(safety))
        mimic = joint.find("mimic")
        if mimic is not None:
            js.follows = mimic.get("joint", "")
            js.note = (f"mimic of {js.follows} (multiplier {mimic.get('multiplier', '1')}, "
                       f"offset {mimic.get('offset', '0')}): not commanded")
        out[name] = js
    return out


class _MjcfDefaults:
    """MJCF default classes: class name -> {joint|actuator -> attributes}, inheritance resolved."""

    def __init__(self, root: ET.Element) -> None:
        self.classes: dict[str, dict[str, dict[str, str]]] = {}
        for top in root.findall("default"):
            self._walk(top, {}, "main")

    def _walk(self, elem: ET.Element, inherited: dict[str, dict[str, str]], name: str) -> None:
        own = {tag: dict(attrs) for tag, attrs in inherited.items()}
        if name in self.classes:  # a second top-level <default> adds to "main"
            for tag, attrs in self.classes[name].items():
                own.setdefault(tag, {}).update(attrs)
        for child in elem:
            if child.tag == "joint":
                own.setdefault("joint", {}).update(child.attrib)
            elif child.tag in _ACTUATOR_TAGS:
                own.setdefault("actuator", {}).update(_shortcut_as_general(child.tag, child.attrib))
        self.classes[name] = own
        for child in elem.findall("default"):
            self._walk(child, own, child.get("class", ""))

    def attrs(self, tag: str, cls: str, elem: ET.Element) -> dict[str, str]:
        merged = dict(self.classes.get(cls, {}).get(tag, {}))
        merged.update(_shortcut_as_general(elem.tag, elem.attrib) if tag == "actuator" else elem.attrib)
        return merged


def _shortcut_as_general(tag: str, attrs: dict[str, str]) -> dict[str, str]:
    """What an actuator shortcut sets on MuJoCo's one actuator type (gain and bias parameters)."""
    out = dict(attrs)
    if tag == "motor":
        out.update(gainprm="1", biastype="none", biasprm="0 0 0")
    elif tag == "position":
        kp, kv = attrs.get("kp", "1"), attrs.get("kv", "0")
        out.update(gainprm=kp, biastype="affine", biasprm=f"0 -{kp} -{kv}".replace("--", ""))
    elif tag == "velocity":
        kv = attrs.get("kv", "1")
        out.update(gainprm=kv, biastype="affine", biasprm=f"0 0 -{kv}".replace("--", ""))
    return out


def is_position_servo(attrs: dict[str, str]) -> bool:
    """MuJoCo's position servo: force = kp*ctrl - kp*length, so ctrl is the target length."""
    try:
        gain = [float(v) for v in attrs.get("gainprm", "1").split()] or [1.0]
        bias = [float(v) for v in attrs.get("biasprm", "0 0 0").split()] + [0.0, 0.0]
    except ValueError:
        return False
    return (attrs.get("biastype", "none") == "affine" and attrs.get("gaintype", "fixed") == "fixed"
            and gain[0] > 0 and bias[0] == 0 and bias[1] == -gain[0])


def _limited(attrs: dict[str, str], flag: str, range_key: str, autolimits: bool, where: str) -> bool:
    """MuJoCo's rule: "auto" means limited when a range is given, and is an error without autolimits."""
    value = attrs.get(flag, "auto")
    if value == "auto":
        if range_key in attrs and not autolimits:
            raise LimitsError(f"{where}: has {range_key} but not {flag} while autolimits is false "
                              "(MuJoCo refuses this model)")
        return range_key in attrs
    return value == "true"


def _compiler(root: ET.Element) -> tuple[bool, bool]:
    """(ranges in degrees, autolimits) from every <compiler>, the last attribute value winning."""
    settings = {"angle": "degree", "autolimits": "true"}
    for compiler in root.findall("compiler"):
        settings.update({k: v for k, v in compiler.attrib.items() if k in settings})
    return settings["angle"] != "radian", settings["autolimits"] == "true"


def _mjcf_sources(root: ET.Element, tree: _Tree, source: str) -> dict[str, JointSource]:
    """Hinge and slide joints of an expanded MJCF tree; ball and free joints are skipped."""
    degrees, autolimits = _compiler(root)
    defaults = _MjcfDefaults(root)
    out: dict[str, JointSource] = {}

    def visit(body: ET.Element, childclass: str) -> None:
        childclass = body.get("childclass", childclass)
        for elem in body:
            if elem.tag == "joint":
                attrs = defaults.attrs("joint", elem.get("class", childclass), elem)
                if attrs.get("type", "hinge") in ("hinge", "slide"):
                    name = attrs.get("name", "")
                    out[name] = _mjcf_joint(attrs, name, tree.at(elem, ""), degrees, autolimits, source)
            elif elem.tag in ("body", "frame"):
                visit(elem, childclass)

    for world in root.findall("worldbody"):
        visit(world, "main")
    actuated: set[str] = set()
    for actuators in root.findall("actuator"):
        for act in actuators:
            attrs = defaults.attrs("actuator", act.get("class", "main"), act)
            joint = attrs.get("joint")
            if act.tag not in _ACTUATOR_TAGS or joint is None:
                continue
            if joint not in out:
                raise LimitsError(f"{source}: actuator '{attrs.get('name', act.tag)}' drives unknown joint '{joint}'")
            actuated.add(joint)
            _apply_actuator(act.tag, attrs, out[joint], joint, tree.at(act, ""), autolimits, source)
    for equality in root.findall("equality"):
        for eq in equality.findall("joint"):
            joint1, joint2 = eq.get("joint1", ""), eq.get("joint2", "")
            follower, leader = (joint2, joint1) if joint1 in actuated and joint2 not in actuated else (joint1, joint2)
            if follower in out and follower not in actuated:
                out[follower].follows = leader or "(held constant)"
                out[follower].note = f"coupled to {leader or 'a constant'} by {tree.at(eq, 'polycoef')}: not commanded"
    return out


def _mjcf_joint(attrs: dict[str, str], name: str, where: str, degrees: bool, autolimits: bool,
                source: str) -> JointSource:
    kind = attrs.get("type", "hinge")
    js = JointSource(kind=kind)
    if _limited(attrs, "limited", "range", autolimits, f"{source}: joint '{name}'"):
        lo, hi = _floats(attrs.get("range", "0 0"), 2, "range", name, source)
        if kind == "hinge" and degrees:
            lo, hi = math.radians(lo), math.radians(hi)
        js.set_many(dict(has_position_limits=True, min_position=lo, max_position=hi), "position",
                    where.replace(">", " range" + (" deg" if kind == "hinge" and degrees else "") + ">"))
    elif kind == "hinge":
        js.note = "hinge without range: no position limit"
    if _limited(attrs, "actuatorfrclimited", "actuatorfrcrange", autolimits, f"{source}: joint '{name}'"):
        lo, hi = _floats(attrs.get("actuatorfrcrange", "0 0"), 2, "actuatorfrcrange", name, source)
        if max(abs(lo), abs(hi)) > 0:
            js.set_many(dict(has_effort_limits=True, max_effort=max(abs(lo), abs(hi))), "effort",
                        where.replace(">", " actuatorfrcrange>"))
    return js


def _apply_actuator(tag: str, attrs: dict[str, str], js: JointSource, joint: str, where: str,
                    autolimits: bool, source: str) -> None:
    """ctrlrange of a position servo narrows the position range; of a velocity servo, the speed."""
    gear = _floats(attrs.get("gear", "1"), 1, "gear", joint, source)[0] or 1.0
    ctrl: list[float] | None = None
    if _limited(attrs, "ctrllimited", "ctrlrange", autolimits, f"{source}: actuator on joint '{joint}'"):
        ctrl = _floats(attrs.get("ctrlrange", "0 0"), 2, "ctrlrange", joint, source)
        what = "ctrlrange"
        if not ctrl[0] < ctrl[1]:
            raise LimitsError(f"{source}: joint '{joint}': {where} ctrlrange {ctrl} is empty (MuJoCo refuses it)")
    inherit = _floats(attrs.get("inheritrange", "0") or "0", 1, "inheritrange", joint, source)[0]
    if tag == "position" and inherit > 0 and js.fields.get("has_position_limits"):
        mid = (js.fields["min_position"] + js.fields["max_position"]) / 2
        half = (js.fields["max_position"] - js.fields["min_position"]) / 2 * inherit
        ctrl, what = [mid - half, mid + half], f"inheritrange={inherit}"
    if ctrl is not None:
        lo, hi = sorted((ctrl[0] / gear, ctrl[1] / gear))
        if tag == "position" or (tag == "general" and is_position_servo(attrs)):
            if js.fields.get("has_position_limits"):
                old = js.origin.get("position", "")
                lo, hi = max(lo, js.fields["min_position"]), min(hi, js.fields["max_position"])
                if lo >= hi:
                    raise LimitsError(f"{source}: joint '{joint}': {where} {what} leaves no range inside "
                                      "the joint range")
                narrowed = (lo, hi) != (js.fields["min_position"], js.fields["max_position"])
                js.set_many(dict(min_position=lo, max_position=hi), "position",
                            f"{old} {'narrowed by' if narrowed else 'within'} {where.replace('>', ' ' + what + '>')}")
            else:
                js.set_many(dict(has_position_limits=True, min_position=lo, max_position=hi), "position",
                            where.replace(">", f" {what}>"))
        elif tag == "velocity":
            js.set_many(dict(has_velocity_limits=True, max_velocity=min(abs(lo), abs(hi))), "velocity",
                        where.replace(">", f" {what}>"))
        elif tag == "motor":
            _narrow_effort(js, max(abs(ctrl[0]), abs(ctrl[1])) * abs(gear), where.replace(">", " ctrlrange*gear>"))
    if _limited(attrs, "forcelimited", "forcerange", autolimits, f"{source}: actuator on joint '{joint}'"):
        lo, hi = _floats(attrs.get("forcerange", "0 0"), 2, "forcerange", joint, source)
        _narrow_effort(js, max(abs(lo), abs(hi)), where.replace(">", " forcerange>"))


def _narrow_effort(js: JointSource, effort: float, where: str) -> None:
    if effort <= 0:
        return
    if js.fields.get("has_effort_limits") and js.fields["max_effort"] <= effort:
        return
    js.set_many(dict(has_effort_limits=True, max_effort=effort), "effort", where)
