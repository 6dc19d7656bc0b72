"""Python bringup: the launch files' nodes as processes, for hosts without ros2 launch (tests, demo).

Each node runs `python -m <module> --ros-args --params-file config/<file>` (and, as the launch files give it,
`joint_limits_file` config/joint_limits.yaml to the nodes that take it); shutdown sends SIGINT,
waits, and only then kills, so nodes get to publish their final hold and close cleanly.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from omni_vla.ros.graph import JOINT_LIMITS_FILE, JOINT_LIMITS_NODES, SIM_NODES, NodeSpec, config_dir
from omni_vla.tools.domains import lock_fds


@dataclass
class Bringup:
    specs: tuple[NodeSpec, ...] = SIM_NODES
    domain_id: int | None = None
    overrides: dict[str, dict[str, object]] = field(default_factory=dict)  # executable -> {param: value}
    log_dir: Path | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self) -> "Bringup":
        env = dict(os.environ)
        if self.domain_id is not None:
            env["ROS_DOMAIN_ID"] = str(self.domain_id)
        cfg = config_dir()
        for spec in self.specs:
            cmd = [sys.executable, "-m", spec.module, "--ros-args", "--params-file", str(cfg / spec.params_file)]
            params = self.overrides.get(spec.executable, {})
            if spec.executable in JOINT_LIMITS_NODES and "joint_limits_file" not in params:  # as the launch files
                params = {"joint_limits_file": str(cfg / JOINT_LIMITS_FILE), **params}
            for key, value in params.items():
                cmd += ["-p", f"{key}:={value}"]
            out = subprocess.DEVNULL
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                out = open(self.log_dir / f"{spec.executable}.log", "w")  # noqa: SIM115 - owned by the child
            self.procs[spec.executable] = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                                           pass_fds=lock_fds(self.domain_id))
        return self

    def dead(self) -> list[str]:
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def stop(self, timeout: float = 10.0) -> dict[str, int]:
        """SIGINT every node, wait up to `timeout`, kill stragglers; returns exit codes."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        codes = {}
        for name, p in self.procs.items():
            try:
                codes[name] = p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                codes[name] = p.wait()
        return codes

    def __enter__(self) -> "Bringup":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
