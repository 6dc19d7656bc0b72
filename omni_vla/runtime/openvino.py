"""ExecuTorch's OpenVINO delegate on the robot: which OpenVINO library a delegated program loads, at which precision
and with how many threads.

The delegate `dlopen`s `libopenvino_c.so` from OPENVINO_LIB_PATH when its first program loads, and OpenVINO's CPU
plugin takes its defaults from the plugins.xml beside that library: without one it runs bf16 on a CPU with AMX or
AVX512-BF16 (a float32 stage then drifts to ~40 dB) and uses every core. So the runtime never loads the install's own
library directory: it points OPENVINO_LIB_PATH at a hard-linked copy of it whose plugins.xml states the bundle's
precision and the node's thread count (made once per pair, atomically). Only the C libraries are loaded here, never
OpenVINO's Python package, so its numpy pin does not reach the robot's environment.

The install is `make setup-openvino` (OpenVINO from PyPI into OMNI_VLA_OPENVINO_DIR, default below).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from omni_vla.runtime.bundle import BundleError

ENV_DIR = "OMNI_VLA_OPENVINO_DIR"
DEFAULT_DIR = Path.home() / ".cache" / "omni_vla" / "openvino"
PRECISION_OF = {"float32": "f32"}  # an artifact's compute_dtype -> the CPU plugin's INFERENCE_PRECISION_HINT
PLUGINS_XML = """<ie>
    <plugins>
        <plugin name="CPU" location="libopenvino_intel_cpu_plugin.so">
            <properties>
                <property key="INFERENCE_PRECISION_HINT" value="{precision}"/>
                <property key="INFERENCE_NUM_THREADS" value="{threads}"/>
            </properties>
        </plugin>
    </plugins>
</ie>
"""
_loaded: dict[str, str] = {}  # what this process pointed the delegate at: {"precision", "threads", "library"}


def openvino_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)


def installed_libs(root: Path) -> Path:
    """The install's library directory (OpenVINO's wheel unpacked by `make setup-openvino`), or a one-line error."""
    libs = root / "py" / "openvino" / "libs"
    if not any(libs.glob("libopenvino_c.so*")):
        raise BundleError(f"the bundle's ExecuTorch programs run on the OpenVINO delegate and OpenVINO is not "
                          f"installed at {root} (no libopenvino_c.so in {libs}): run `make setup-openvino`, "
                          f"or set {ENV_DIR}")
    return libs


def configured_library(root: Path, precision: str, threads: int) -> Path:
    """root/runtime/<precision>_t<threads>/libopenvino_c.so*: the install's libraries hard-linked (copied across file
    systems) beside a plugins.xml for that precision and thread count."""
    libs = installed_libs(root)
    dest = root / "runtime" / f"{precision}_t{threads}"
    if not (dest / "plugins.xml").is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        for f in libs.iterdir():
            if f.is_symlink():
                os.symlink(os.readlink(f), tmp / f.name)
            elif f.is_file() and f.name != "plugins.xml":
                try:
                    os.link(f, tmp / f.name)
                except OSError:
                    shutil.copy2(f, tmp / f.name)
        (tmp / "plugins.xml").write_text(PLUGINS_XML.format(precision=precision, threads=threads))
        try:
            os.replace(tmp, dest)
        except OSError:  # another process made it first: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    return sorted(dest.glob("libopenvino_c.so*"))[0]


def use_openvino(compute_dtype: str, threads: int, what: str) -> None:
    """Point the delegate at the configured library before `what` (a delegated program) loads; a second configuration
    that differs is refused (the library is loaded once per process, with the first one's plugins.xml)."""
    precision = PRECISION_OF.get(compute_dtype)
    if precision is None:
        raise BundleError(f"{what}: the OpenVINO delegate runs {sorted(PRECISION_OF)} programs here, "
                          f"not {compute_dtype}")
    want = {"precision": precision, "threads": str(threads)}
    if _loaded:
        if {k: _loaded[k] for k in want} != want:
            raise BundleError(f"{what}: OpenVINO is loaded in this process at {_loaded['precision']} with "
                              f"{_loaded['threads']} thread(s); this needs {precision} with {threads} "
                              "(one configuration per process)")
        os.environ["OPENVINO_LIB_PATH"] = _loaded["library"]
        return
    library = str(configured_library(openvino_dir(), precision, threads))
    os.environ["OPENVINO_LIB_PATH"] = library
    _loaded.update(want, library=library)


def plugin_properties(library: str | os.PathLike[str]) -> dict[str, str]:
    """What the plugins.xml beside `library` sets (empty: the CPU plugin's own defaults)."""
    if not str(library):
        return {}
    xml = Path(library).parent / "plugins.xml"
    return dict(re.findall(r'key="([A-Z_]+)" value="([^"]*)"', xml.read_text())) if xml.is_file() else {}
