"""The policy's cameras, by name: what a bundle asks for and how the loop and the node map them.

A bundle names its cameras (docs/bundle_format.md); the loop keeps each camera's newest frame in the
observation under that name, the node subscribes one topic per name (`topics.cameras`, "name=topic"
entries), the simulator renders cameras of the same names. A name is matched exactly, never guessed.
"""
from __future__ import annotations

import re
from typing import Iterable, NamedTuple

# The reference policy's cameras, and the simulated robot's (sim/scene.py renders both).
REFERENCE_CAMERAS: tuple[str, ...] = ("front", "wrist")
# Observation keys the loop uses for other data: a camera cannot be called this.
RESERVED = frozenset({"qpos", "qvel", "instruction", "stamps", "joints"})
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class CameraInput(NamedTuple):
    """One camera a policy reads: its name and the resolution it is fed at (float32 [1, 3, H, W], RGB, [0, 1])."""

    name: str
    height: int
    width: int


def check_camera_name(name: str) -> str:
    """A camera name is an identifier that is not one of the loop's own observation keys."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"camera name {name!r}: expected a letter followed by letters, digits or '_'")
    if name in RESERVED:
        raise ValueError(f"camera name {name!r} is reserved by the loop ({', '.join(sorted(RESERVED))})")
    return name


def parse_camera_topics(entries: Iterable[str]) -> dict[str, str]:
    """["front=/camera/front/image_raw", ...] -> {"front": "/camera/front/image_raw", ...}; one line on a bad entry."""
    topics: dict[str, str] = {}
    for entry in entries:
        name, sep, topic = (part.strip() for part in entry.partition("="))
        if not sep or not topic:
            raise ValueError(f"camera topic entry {entry!r}: expected 'name=/topic'")
        check_camera_name(name)
        if name in topics:
            raise ValueError(f"camera {name!r} is given two topics ({topics[name]!r} and {topic!r})")
        topics[name] = topic
    return topics


def missing_cameras(wanted: Iterable[CameraInput], available: Iterable[str], what: str) -> str | None:
    """One line naming the cameras a policy wants that `what` does not provide, or None."""
    have = list(available)
    missing = [c.name for c in wanted if c.name not in have]
    if not missing:
        return None
    return f"the policy reads camera(s) {missing} but {what} has {have}"
