"""ros2_control joint_limits YAML for tests, written from numbers: each min_/max_ field switches its
has_*_limits flag on, so a test states only the limits it is about."""
from __future__ import annotations

from typing import Any

import yaml


def limits_yaml(**joints: dict[str, Any]) -> str:
    """{joint: {field: value}} -> joint_limits YAML text (explicit has_* fields are kept as given)."""
    table: dict[str, dict[str, Any]] = {}
    for name, fields in joints.items():
        entry: dict[str, Any] = {}
        for key, value in fields.items():
            group = "position" if key in ("min_position", "max_position") else key[4:] if key.startswith("max_") else ""
            if group:
                entry.setdefault(f"has_{group}_limits", True)
            entry[key] = value
        table[name] = entry
    return yaml.safe_dump({"joint_limits": table}, sort_keys=False)
