"""One owner for backend names and bundle kinds (omni_vla/backends.py, omni_vla/runtime/registry.py): the tables
that load them cover exactly the names, a bundle's manifest is read once to open it, eager PyTorch is found as an
entry point, and no other module of the package spells a list of backend names."""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from omni_vla import backends
from omni_vla.core.settings import VlaNodeConfig
from omni_vla.inference import client
from omni_vla.runtime import registry
from omni_vla.runtime.bundle import BundleError

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "bundles" / "reference"
NAMES = set(backends.ALL_BACKENDS) | set(backends.ARTIFACT_FORMATS)
# Where a list of backend names may be spelled: the owner, and the tables keyed by its names (checked below).
OWNERS = {"omni_vla/backends.py", "omni_vla/runtime/registry.py", "policies/vla/runners.py",
          "policies/converters.py"}  # converters: the distributions whose versions an export records


def test_the_loader_tables_cover_exactly_the_registered_names() -> None:
    assert tuple(registry.KINDS) == backends.BUNDLE_KINDS
    assert tuple(registry.ROBOT_RUNTIMES) == backends.ROBOT_BACKENDS
    assert set(client._OPEN) == set(backends.BUNDLE_KINDS)
    assert set(backends.ARTIFACT_OF.values()) <= set(backends.ARTIFACT_FORMATS)
    assert set(backends.SUFFIX_OF) == set(backends.LIBRARY_OF) == set(backends.ARTIFACT_FORMATS)
    assert get_args(VlaNodeConfig.model_fields["backend"].annotation) == backends.ROBOT_BACKENDS


def test_eager_torch_is_a_registered_entry_point_not_a_runtime_import() -> None:
    assert registry.backend_names() == (*backends.ROBOT_BACKENDS, backends.EAGER)
    assert registry.registered_backends()[backends.EAGER].value == "omni_vla_policies.torch_runtime:TorchRuntime"
    with pytest.raises(ValueError, match=r"unknown backend 'tpu'; expected one of \['executorch', 'mnn', 'torch'\]"):
        client.open_runtime("tpu", str(REFERENCE), 1)


@pytest.mark.parametrize("raw, kind", [
    ({"format": "omni_vla.bundle/2"}, "flow"),
    ({"format": "omni_vla.bundle/2", "kind": "vla"}, None),
    ({"format": "omni_vla.bundle/3", "kind": "chunk"}, "chunk"),
    ({"format": "omni_vla.bundle/3", "kind": "vla"}, "vla"),
    ({"format": "omni_vla.bundle/3"}, None),
    ({"format": "omni_vla.bundle/3", "kind": "world"}, None),
    ({"format": "omni_vla.bundle/4", "kind": "vla"}, None),
    (["not", "a", "manifest"], None),
])
def test_the_kind_is_read_from_format_and_kind(raw: object, kind: str | None) -> None:
    assert registry.kind_of(raw) == kind


@pytest.mark.parametrize("backend, library, install", [("executorch", "executorch", "pip install 'omni_vla[executorch]'"),
                                                       ("mnn", "MNN", "pip install omni_vla (mnn is a dependency)")])
def test_a_robot_backend_that_is_not_installed_is_refused_in_one_line_naming_what_installs_it(
        monkeypatch: pytest.MonkeyPatch, backend: str, library: str, install: str) -> None:
    monkeypatch.setitem(sys.modules, library, None)  # None in sys.modules: the module cannot be found
    for load in (registry.robot_module, registry.flow_runtime):
        with pytest.raises(registry.BackendUnavailable) as exc:
            load(backend)
        assert str(exc.value) == f"backend {backend!r} is not installed here (no module {library}): {install}"


def test_a_command_on_a_machine_without_executorch_exits_2_with_that_line(tmp_path: Path) -> None:
    """As on a robot where torch is present but executorch is not: the library itself fails to import (here a
    package of that name that raises as a missing one does). The worker process reports it; the verb says it."""
    shim = tmp_path / "executorch"
    shim.mkdir()
    (shim / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'executorch'\", name='executorch')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "loop", "--bundle", str(REFERENCE),
                           "--backends", "executorch", "--rates", "50", "--ticks", "10", "--heap-ticks", "0",
                           "--no-cold-start", "--json"], capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()  # torch is missing first on a robot without it (the 3.12 robot-path venv)
    assert len(lines) == 1 and re.fullmatch(
        r"omni-vla bench loop: inference worker failed to load the runtime: BackendUnavailable: backend 'executorch' "
        r"is not installed here \(no module (executorch|torch)\): pip install 'omni_vla\[executorch\]'", lines[0]), lines


def test_an_unknown_format_or_kind_is_refused_in_one_line_naming_what_is_read(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "omni_vla.bundle/3", "kind": "world"}))
    with pytest.raises(BundleError) as exc:
        registry.read_any_manifest(tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg and "kind 'world'" in msg and "'omni_vla.bundle/2' kind 'flow'" in msg, msg
    assert registry.sniff_kind(tmp_path / "missing") is None


def test_open_runtime_reads_the_manifest_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(REFERENCE, bundle, ignore=shutil.ignore_patterns("*.onnx", "*.pt", "*.pte"))
    reads: list[Path] = []
    read_text = Path.read_text

    def counted(self: Path, *a: object, **k: object) -> str:
        if self.name == "manifest.json":
            reads.append(self)
        return read_text(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", counted)
    rt = client.open_runtime("mnn", str(bundle), 1)
    rt.close()
    assert reads == [bundle / "manifest.json"]


def _backend_lists(path: Path) -> list[str]:
    """Tuples, lists, sets, dict keys and comma strings that spell two or more backend names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "," in node.value:
            elts = [ast.Constant(p) for p in node.value.split(",")]
        else:
            continue
        if sum(isinstance(e, ast.Constant) and e.value in NAMES for e in elts) >= 2:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_no_other_module_spells_a_list_of_backend_names() -> None:
    files = [p for root in ("omni_vla", "sim", "policies") for p in sorted((REPO / root).rglob("*.py"))]
    bad = [hit for p in files if str(p.relative_to(REPO)) not in OWNERS for hit in _backend_lists(p)]
    assert not bad, "backend names spelled outside omni_vla/backends.py (derive them from it):\n" + "\n".join(bad)
