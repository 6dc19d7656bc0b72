"""ROS parameter conventions shared by every rclpy node of the project, generated from pydantic models.

One descriptor per parameter: type from the annotation, description from the Field, range from its
ge/gt/le/lt bounds, `read_only` unless the node names it live. Nested models are flat ROS names
("topics.joint_states"). `unknown_overrides` names the keys of a parameter file or command line that
the node does not declare (with the nearest valid name): rclpy would silently ignore them and the
node would run on defaults. Here, not in omni_vla/, because the supervisor uses it and imports
nothing of the project.
"""
from __future__ import annotations

import difflib
import math
from array import array
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType

_SCALARS = {bool: ParameterType.PARAMETER_BOOL, int: ParameterType.PARAMETER_INTEGER,
            float: ParameterType.PARAMETER_DOUBLE, str: ParameterType.PARAMETER_STRING,
            Path: ParameterType.PARAMETER_STRING}
_ARRAYS = {bool: ParameterType.PARAMETER_BOOL_ARRAY, int: ParameterType.PARAMETER_INTEGER_ARRAY,
           float: ParameterType.PARAMETER_DOUBLE_ARRAY, str: ParameterType.PARAMETER_STRING_ARRAY}
_BOUND_TEXT = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
READ_ONLY_TEXT = "read-only: set at start-up (params file, launch argument or -p)"
FLOAT_BOUND = 1e308  # finite stand-in for an open side of a double range (see `descriptor`)
INT_BOUND = 2**63 - 1
# Declared by rclpy itself or handled by rcl (QoS overrides), never by a node's model.
_FRAMEWORK_PREFIXES = ("qos_overrides.",)


def parameter_type(annotation: Any) -> int:
    """The ROS parameter type of a field annotation (Literal[str, ...] is a string, Path a string)."""
    if get_origin(annotation) is list:
        return _ARRAYS[get_args(annotation)[0]]
    if get_origin(annotation) is Literal:
        return _SCALARS[type(get_args(annotation)[0])]
    return _SCALARS[annotation]


def model_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """(flat ROS name, field) for every leaf field; a nested model's fields are `<field>.<sub>`."""
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from model_fields(ann, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def descriptor(name: str, field: FieldInfo, read_only: bool) -> ParameterDescriptor:
    """Type, description, range (from the Field's gt/ge/lt/le), allowed values and read-only flag.

    A double bounded on one side only gets +/-FLOAT_BOUND, not infinity, on the other: rclpy accepts a
    value equal to a range's end, so with an infinite end `.inf` would pass its range check (and then
    pydantic's, which allows inf) and reach the node as a timeout or limit that never trips.
    """
    ptype = parameter_type(field.annotation)
    desc = ParameterDescriptor(name=name, type=ptype, description=field.description or name, read_only=read_only)
    bounds = {op: getattr(m, op) for m in field.metadata for op in ("gt", "ge", "lt", "le")
              if getattr(m, op, None) is not None}
    constraints = [f"{_BOUND_TEXT[op]} {v}" for op, v in bounds.items()]
    if get_origin(field.annotation) is Literal:
        constraints.append("one of: " + ", ".join(map(str, get_args(field.annotation))))
    if read_only:
        constraints.append(READ_ONLY_TEXT)
    desc.additional_constraints = "; ".join(constraints)
    lo = bounds.get("gt", bounds.get("ge", -math.inf))
    hi = bounds.get("lt", bounds.get("le", math.inf))
    if bounds and ptype == ParameterType.PARAMETER_DOUBLE:
        desc.floating_point_range = [FloatingPointRange(from_value=float(max(lo, -FLOAT_BOUND)),
                                                        to_value=float(min(hi, FLOAT_BOUND)), step=0.0)]
    elif bounds and ptype == ParameterType.PARAMETER_INTEGER:
        desc.integer_range = [IntegerRange(from_value=int(max(lo, -INT_BOUND)), to_value=int(min(hi, INT_BOUND)),
                                           step=0)]
    return desc


def coerce(ptype: int, value: Any) -> Any:
    """A YAML `rate_hz: 20` is an integer: accept it for a double parameter, as the file reads; likewise
    `-p worker_cpus:=1` for a string parameter (its text)."""
    if ptype == ParameterType.PARAMETER_DOUBLE and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if ptype == ParameterType.PARAMETER_STRING and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if ptype == ParameterType.PARAMETER_DOUBLE_ARRAY and isinstance(value, (list, array)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """Parameter values as pydantic takes them (rclpy gives arrays as array.array)."""
    return list(value) if isinstance(value, (array, tuple)) else value


def unknown_overrides(overrides: Iterable[str], known: Iterable[str]) -> str | None:
    """One line naming every override the node does not declare and the nearest valid name, or None.

    The full list of known names follows only when some name has no near match (a typo's hint is enough)."""
    known = sorted(set(known))
    unknown = sorted(n for n in overrides if n not in known and not n.startswith(_FRAMEWORK_PREFIXES))
    if not unknown:
        return None
    parts, guessed = [], True
    for name in unknown:
        near = difflib.get_close_matches(name, known, 1, cutoff=0.6)
        parts.append(f"'{name}' (did you mean '{near[0]}'?)" if near else f"'{name}'")
        guessed = guessed and bool(near)
    line = f"unknown parameter(s) {', '.join(parts)}"
    return line if guessed else f"{line}; known parameters: {', '.join(known)}"
