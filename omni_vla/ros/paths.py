"""Where vla_node finds its bundle: the working directory, else the installed package's share directory.

`ros2 launch` on a robot starts nodes in whatever directory the user is in, while the shipped bundle
is installed under share/omni_vla/bundles/ of the colcon install space (setup.py data_files).
"""
from __future__ import annotations

import sys
from pathlib import Path

from omni_vla.runtime.bundle import MANIFEST_NAME, BundleError

PACKAGE = "omni_vla"


def package_share() -> Path | None:
    """share/omni_vla of the install this code runs from: the ament index, else sys.prefix/share/omni_vla."""
    try:
        from ament_index_python.packages import get_package_share_directory  # optional: a ROS install or the wheels

        return Path(get_package_share_directory(PACKAGE))
    except Exception:  # noqa: BLE001 - ImportError, PackageNotFoundError, or no AMENT_PREFIX_PATH at all
        pass
    candidate = Path(sys.prefix) / "share" / PACKAGE
    return candidate if candidate.is_dir() else None


def resolve_bundle_dir(bundle_dir: str | Path, cwd: Path | None = None, share: Path | None = None) -> Path:
    """An absolute path as given; a relative one under the working directory if it holds a bundle there,
    else under the package share directory. BundleError naming every place looked in when none holds one."""
    path = Path(bundle_dir).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        share = share if share is not None else package_share()
        candidates = [(cwd or Path.cwd()) / path] + ([share / path] if share is not None else [])
    for candidate in candidates:
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    where = ", ".join(str(c) for c in candidates)
    hint = "" if path.is_absolute() or len(candidates) > 1 else " (package share directory not found)"
    raise BundleError(f"bundle_dir {str(bundle_dir)!r}: no {MANIFEST_NAME} in {where}{hint}")
