"""What vla_node's configure builds, without ROS: flat parameters -> checked settings, a started inference
worker, the re-planner and the assembled loop (omni_vla.core.assembly.build_loop).

The node only reads its parameters, picks the clocks and turns the outcome into a lifecycle transition, so
every refusal below is testable without rclpy and worded once (ConfigureError: the line the node logs).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import ValidationError

from omni_vla.cameras import CameraInput, missing_cameras
from omni_vla.cloud import Replanner, load_replan_config
from omni_vla.core.assembly import Loop, build_loop
from omni_vla.core.settings import VlaNodeConfig
from omni_vla.inference.client import RuntimeFactory
from omni_vla.inference.worker import ProcessInference
from omni_vla.ros.paths import resolve_bundle_dir
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.registry import read_any_manifest
from omni_vla_safety.errors import explain
from omni_vla_safety.limits import describe_limits


class ConfigureError(Exception):
    """Why configure fails, as the one line the node logs after 'configure failed: '."""


@dataclass
class Assembly:
    """The configured parts; `cfg` holds the rate and execution horizon the loop runs at."""

    cfg: VlaNodeConfig
    inference: ProcessInference
    replanner: Replanner | None
    loop: Loop
    hardware_id: str

    def summary(self, sim_time: bool) -> str:
        cfg, shaper = self.cfg, self.loop.shaper
        shaping = f"rows shaped to {cfg.command_accel_fraction:g} of the limits" if shaper is not None else "rows unshaped"
        return (f"configured: {cfg.backend} bundle {cfg.bundle_dir}, {cfg.rate_hz:g} Hz, strategy {cfg.strategy}, "
                f"execution horizon {cfg.execution_horizon}, {shaping}, worker pid {self.inference.pid}, warm chunk "
                f"{self.inference.warm_chunk_s:.3g} s (hung after {self.inference.hung_after_s:.3g} s)"
                + (", on ROS time (use_sim_time)" if sim_time else ""))

    def warnings(self) -> list[str]:
        if self.loop.shaper is None and self.cfg.command_accel_fraction > 0:
            return ["command shaping off: no joint_limits_file (the plan's rows go to the supervisor as they are)"]
        return []


def read_settings(flat: dict[str, Any]) -> tuple[VlaNodeConfig, Any]:
    """The validated settings (bundle_dir resolved: the working directory, else the installed share/omni_vla)
    and the bundle's manifest; a missing or bad bundle fails here, before a worker starts."""
    try:
        cfg = VlaNodeConfig.from_ros_parameters(flat)
        cfg = cfg.model_copy(update={"bundle_dir": resolve_bundle_dir(cfg.bundle_dir)})
        manifest = read_any_manifest(cfg.bundle_dir)
    except BundleError as exc:
        raise ConfigureError(f"bad bundle: {exc}") from None
    except ValidationError as exc:
        raise ConfigureError(f"invalid parameters: {explain(exc)}") from None
    except ValueError as exc:
        raise ConfigureError(f"invalid parameters: {exc}") from None
    problem = missing_cameras([CameraInput(c.name, c.height, c.width) for c in manifest.cameras],
                              cfg.topics.camera_topics(), "topics.cameras")
    if problem is not None:
        raise ConfigureError(f"{problem}; add a 'name=/topic' entry for each")
    return cfg, manifest


def robot_limits(cfg: VlaNodeConfig, joints: list[str]) -> dict[str, Any] | None:
    """The robot's limits file (None when not set); the bundle's joints must all be the robot's (an entry in
    its limits file), checked before a worker starts."""
    if not cfg.joint_limits_file:
        return None
    try:
        _, sets, _ = describe_limits(cfg.joint_limits_file, cfg.joint_limits_overlay or None)
        limits = {joint: spec.hard for joint, spec in sets.items()}
    except (OSError, ValueError) as exc:
        overlay = f" + joint_limits_overlay {cfg.joint_limits_overlay}" if cfg.joint_limits_overlay else ""
        raise ConfigureError(f"joint_limits_file {cfg.joint_limits_file}{overlay}: {exc}") from None
    missing = [j for j in joints if j not in limits]
    if missing:
        raise ConfigureError(f"the bundle's joints {missing} have no limits in {cfg.joint_limits_file} (the robot's "
                             f"joints: {sorted(limits)})")
    return limits


def open_replanner(cfg: VlaNodeConfig) -> Replanner | None:
    """The started Replanner for `cfg.openpi_config`, or None when the robot stays local.

    Raises ValueError naming what does not fit (file, rate, action size), so configure fails clearly.
    """
    if not cfg.openpi_config:
        return None
    rcfg = load_replan_config(cfg.openpi_config)
    if not rcfg.enabled:
        return None
    if abs(rcfg.rate_hz - cfg.rate_hz) > 1e-9:
        raise ValueError(f"{cfg.openpi_config}: rate_hz {rcfg.rate_hz:g} differs from the loop's {cfg.rate_hz:g}")
    if rcfg.action_dim != len(cfg.joint_names):
        raise ValueError(f"{cfg.openpi_config}: action_dim {rcfg.action_dim} but {len(cfg.joint_names)} joint_names")
    try:
        api_key = rcfg.client.api_key()  # a named but unset variable is refused here, before any connection
    except ValueError as exc:
        raise ValueError(f"{cfg.openpi_config}: {exc}") from None
    return Replanner(rcfg, api_key=api_key).start()


def assemble(flat: dict[str, Any], runtime_factory: RuntimeFactory, clock: Callable[[], float],
             stamp_clock: Callable[[], float]) -> Assembly:
    """Settings, limits, worker (load + warm-up), re-planner and loop; ConfigureError, with nothing left
    running, when any of them is refused. `clock`: the tick's time base; `stamp_clock`: the messages'."""
    cfg, manifest = read_settings(flat)
    limits = robot_limits(cfg, list(manifest.joint_names))
    digest = hashlib.sha256((cfg.bundle_dir / "manifest.json").read_bytes()).hexdigest()[:8]
    try:
        inference = ProcessInference.from_settings(cfg.backend, str(cfg.bundle_dir), cfg.threads, cfg.worker(),
                                                   factory=runtime_factory, noise_scale=cfg.noise_scale).start()
    except Exception as exc:
        raise ConfigureError(f"cannot start the {cfg.backend} runtime for {cfg.bundle_dir}: {exc}") from None
    replanner = None
    try:
        replanner = open_replanner(cfg)
        loop = build_loop(cfg.loop(), inference, replanner=replanner, clock=clock, stamp_clock=stamp_clock,
                          limits=limits)
    except Exception as exc:  # noqa: BLE001 - whatever refused it (a YAML syntax error too), the worker is stopped
        inference.close()
        if replanner is not None:
            replanner.close()
        known = isinstance(exc, (ValidationError, ValueError, OSError))
        raise ConfigureError(str(exc) if known else f"{type(exc).__name__}: {exc}") from None
    # The rate and execution horizon the loop runs at (a 0 parameter is the bundle's own value).
    cfg = cfg.model_copy(update={k: getattr(loop.settings, k) for k in ("rate_hz", "execution_horizon")})
    return Assembly(cfg, inference, replanner, loop, f"{manifest.policy}@{digest} ({cfg.backend})")
