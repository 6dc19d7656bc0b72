"""`omni-vla eval`: the closed-loop evaluation suite, in simulated time.

Every episode is a pure function of (bundle, backend, task, seed, settings): the same control core
(omni_vla.core.controller) and the same supervisor logic (omni_vla_safety.supervisor) as on the robot,
stepped in simulated time, so results do not depend on the machine's speed, the worker count, or
whether episodes run locally or as Ray tasks.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import multiprocessing as mp

import cv2
import mujoco
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

import omni_vla
from omni_vla.cameras import missing_cameras
from omni_vla.backends import LOOP_BACKENDS, LoopBackend
from omni_vla.core.chunking import STRATEGIES, Strategy
from omni_vla.core.settings import LoopSettings, node_settings
from omni_vla.tools.errors import describe, is_user_error, non_negative_int, positive_int
from omni_vla.tools.outputs import native_stdout_silenced
from omni_vla_safety.config import config_from_yaml
from omni_vla_safety.limits import load_enforced_limits
from omni_vla_safety.supervisor import Supervisor
from omni_vla_sim import robot
from omni_vla_sim.agents import make_agent, release_runtimes, shared_runtime
from omni_vla_sim.bag import write_bag
from omni_vla_sim.compare import compare, variants
from omni_vla_sim.dataset import POLICY_IMAGE_SIZE, Episode, write_episode
from omni_vla_sim.env import EnvConfig, PandaTaskEnv
from omni_vla_sim.remote import check_server
from omni_vla_sim.report import EpisodeResult, smoothness, summarise, write_report
from omni_vla_sim.showcase import overlay, write_frames, write_video
from omni_vla_sim.tasks import EVAL_SEED_BASE, TASKS, get_task

REPO = Path(__file__).resolve().parent.parent
# What vla_node runs (config/vla_node.yaml): the suite's defaults, so one file sets both.
NODE = node_settings(REPO / "config" / "vla_node.yaml")
Agent = Literal["expert", "openpi"]  # driven by the simulator's expert or an OpenPI server, not by a bundle
Backend = Literal[LoopBackend, Agent]
BACKENDS: tuple[str, ...] = get_args(Backend)
RECORD_FORMATS = ("hdf5", "mcap")


class EvalSettings(BaseModel):
    """What an evaluation run is; every field changes results except `workers`/`out`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Backend = "mnn"
    bundle_dir: Path | None = None
    tasks: tuple[str, ...] = tuple(sorted(TASKS))
    episodes: int = Field(50, ge=1)
    seed_base: int = Field(EVAL_SEED_BASE, ge=EVAL_SEED_BASE)
    held_out: bool = False
    strategy: Strategy = NODE.strategy
    # The node's: its delay is ceil(p95 latency / tick), so any inference latency is at least one tick.
    delay_ticks: int = Field(1, ge=0, le=8)
    execution_horizon: int = Field(NODE.execution_horizon, ge=0, description="0: the bundle's execute_steps")
    noise_scale: float = Field(NODE.noise_scale, ge=0.0, le=1.0, description="flow sampling temperature (0: deterministic)")
    splice_blend_ticks: int = Field(NODE.splice_blend_ticks, ge=0, le=64, description="'naive' crossfade (ticks)")
    command_accel_fraction: float = Field(NODE.command_accel_fraction, ge=0, le=1,
                                          description="command shaping against joint_limits (0: off)")
    command_max_lead: tuple[str, ...] = Field(tuple(NODE.command_max_lead), description="'joint=bound' lead bounds")
    threads: int = Field(NODE.threads, ge=1)
    image_size: int = Field(128, ge=16)
    supervisor_config: Path = REPO / "config" / "safety_supervisor.yaml"
    joint_limits: Path = REPO / "config" / "joint_limits.yaml"
    openpi_url: str | None = None
    replan: bool = Field(False, description="local policy plus cloud re-planning on stall (needs openpi_url)")
    cloud_latency_ms: float = Field(300.0, ge=0, description="simulated time from cloud request to reply")
    replan_cadence_s: float = Field(0.0, ge=0, description="also re-plan every this many seconds (0: stall only)")
    stall_window_s: float = Field(1.0, ge=0, description="re-plan when the gripper made no progress for this long")
    stall_ee_tol_m: float = Field(0.01, ge=0, description="... i.e. travelled less than this (and did not open/close)")
    record_actions: bool = True

    @model_validator(mode="after")
    def _check(self) -> "EvalSettings":
        for t in self.tasks:
            get_task(t)
        if self.backend in LOOP_BACKENDS and self.bundle_dir is None:
            raise ValueError(f"backend {self.backend!r} needs a bundle_dir")
        if (self.backend == "openpi" or self.replan) and not self.openpi_url:
            raise ValueError("backend 'openpi' and --replan need openpi_url (ws://host:port)")
        return self


@dataclass(frozen=True)
class EpisodeSpec:
    settings: EvalSettings
    task: str
    seed: int
    video: str | None = None
    record: str | None = None


def episode_specs(settings: EvalSettings, videos: int = 0, video_dir: Path | None = None,
                  record_dir: Path | None = None, record_format: str = "hdf5") -> list[EpisodeSpec]:
    """One spec per (task, seed); recordings go to <record_dir>/<task>/<task>_<seed>.hdf5 or an MCAP bag dir."""
    if record_format not in RECORD_FORMATS:
        raise ValueError(f"record_format must be one of {RECORD_FORMATS}, got {record_format!r}")
    suffix = ".hdf5" if record_format == "hdf5" else ".mcap"
    specs = []
    for task in settings.tasks:
        for k in range(settings.episodes):
            seed = settings.seed_base + k
            video = str(video_dir / f"{task}_{seed}.mp4") if video_dir and k < videos else None
            record = str(record_dir / task / f"{task}_{seed}{suffix}") if record_dir else None
            specs.append(EpisodeSpec(settings, task, seed, video, record))
    return specs


# ------------------------------------------------------------------------------ one episode
_envs: dict[tuple[int, str], PandaTaskEnv] = {}


def release_cache() -> None:
    """Close what episodes cached in this process (worker processes simply exit)."""
    release_runtimes()
    for env in _envs.values():
        env.close()
    _envs.clear()


def episode_env(s: EvalSettings, task: str) -> PandaTaskEnv:
    """The simulator for an episode; one per process, reused (every task shares one scene)."""
    key = (s.image_size, str(s.joint_limits))
    if key not in _envs:
        _envs[key] = PandaTaskEnv(task, EnvConfig(image_size=s.image_size, limits_file=s.joint_limits))
    return _envs[key]


def episode_supervisor(s: EvalSettings) -> Supervisor:
    """A fresh safety supervisor, configured as safety_supervisor is (config/safety_supervisor.yaml)."""
    cfg = config_from_yaml(s.supervisor_config)
    return Supervisor(cfg, load_enforced_limits(s.joint_limits, cfg.joint_names))


def run_episode(spec: EpisodeSpec) -> EpisodeResult:
    """One closed-loop episode: policy -> supervisor (at its own rate) -> simulated robot."""
    s = spec.settings
    env = episode_env(s, spec.task)
    task = get_task(spec.task)
    held = next(i.text for i in task.instructions if i.held_out)
    obs = env.reset(spec.seed, held if s.held_out else None, task=spec.task)
    sup = episode_supervisor(s)
    agent = make_agent(s, env, spec.seed)
    names = list(sup.config.joint_names)
    control_dt = 1.0 / env.config.control_hz
    inner = max(1, round(control_dt * sup.config.rate_hz))
    nstep = max(1, env.n_substeps // inner)
    now, tick, ok, done = 0.0, 0, False, False
    executed, frames, recorded = [], [], []
    hold = obs["qpos"].copy()
    while not done:
        sup.on_joint_state(names, obs["qpos"], now)
        proposal = agent.act(obs, tick)
        if proposal is not None:  # as vla_node publishes it: one row due a control period after its stamp
            sup.on_trajectory(names, [(control_dt, np.asarray(proposal, np.float64))], now, now)
        for k in range(inner):
            qpos, _ = env.joint_state()
            sup.on_joint_state(names, qpos, now)
            cmd = sup.tick(now)
            if cmd is not None:
                hold = np.asarray(cmd)
            env.apply(hold, nstep)
            now += control_dt / inner
        executed.append(hold.copy())
        if spec.record:
            recorded.append(obs)
        if spec.video:
            lat = f"{agent.latencies_ms[-1]:.1f} ms" if agent.latencies_ms else "-"
            frames.append(overlay(obs["front"], obs["wrist"],
                                  [spec.task, f"tick {tick}  latency {lat}", obs["instruction"][:40]]))
        obs, _, ok, truncated, _ = env.end_tick()
        tick += 1
        done = ok or truncated
    agent.close()
    actions = np.asarray(executed)
    ctrl = agent.loop.controller if agent.loop is not None else None
    interventions = sum(v for k, v in sup.counts.items() if k not in ("estop_reset",))
    result = EpisodeResult(
        task=spec.task, seed=spec.seed, instruction=env.instruction.text, held_out=env.instruction.held_out,
        success=bool(ok), steps=tick, interventions=int(interventions),
        interventions_by_kind={k: int(v) for k, v in sup.counts.items()},
        shaping=sum(sup.shaping.values()), clamps=sum(sup.clamps.values()), clamps_by_kind=dict(sup.clamps),
        holds=int(ctrl.counts["holds"]) if ctrl else 0,
        cloud_plans=int(ctrl.counts.get("cloud_plans", 0)) if ctrl else 0,
        latency_ms=[round(v, 3) for v in agent.latencies_ms],
        actions=actions.round(5).tolist() if s.record_actions else None,
        **smoothness(actions, control_dt, agent.boundaries),
    )
    if spec.record:
        _record(spec, env, recorded, actions, bool(ok))
    if spec.video:
        result.video = str(write_video(Path(spec.video), frames, env.config.control_hz))
        result.frames = str(write_frames(Path(spec.video).with_suffix(".png"), frames))
    return result


def _record(spec: EpisodeSpec, env: Any, observations: list[dict], actions: np.ndarray, ok: bool) -> None:
    """The episode in the demonstration format (atomic file, policy image size) or as an MCAP bag."""
    if spec.record.endswith(".mcap"):
        write_bag(spec.record, observations, actions, list(robot.JOINT_NAMES), 1.0 / env.config.control_hz,
                  env.instruction.text)
        return
    size = (POLICY_IMAGE_SIZE, POLICY_IMAGE_SIZE)

    def images(key: str) -> np.ndarray:
        return np.stack([cv2.resize(o[key], size, interpolation=cv2.INTER_AREA) for o in observations])

    ep = Episode(task=spec.task, instruction=env.instruction.text, instruction_held_out=env.instruction.held_out,
                 seed=spec.seed, success=ok, front=images("front"), wrist=images("wrist"),
                 qpos=np.stack([o["qpos"] for o in observations]).astype(np.float32),
                 qvel=np.stack([o["qvel"] for o in observations]).astype(np.float32),
                 actions=actions.astype(np.float32))
    write_episode(spec.record, ep, list(robot.JOINT_NAMES))


# ------------------------------------------------------------------------------ many episodes
def run_local(specs: list[EpisodeSpec], workers: int, progress: bool = True,
              max_restarts: int = 3) -> tuple[list[EpisodeResult], list[str]]:
    """Episodes in spawned worker processes; a crashed worker's episodes are re-run, never dropped."""
    pending = {(sp.task, sp.seed): sp for sp in specs}
    results: dict[tuple[str, int], EpisodeResult] = {}
    crashes: list[str] = []
    bar = tqdm(total=len(specs), desc="eval", disable=not progress, file=sys.stderr)
    restarts = 0
    while pending:
        if workers <= 1 and not os.environ.get("OMNI_VLA_EVAL_FORCE_POOL"):
            for key, sp in list(pending.items()):
                results[key] = run_episode(sp)
                del pending[key]
                bar.update()
            break
        try:
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
                futures = {pool.submit(run_episode, sp): key for key, sp in pending.items()}
                for fut in as_completed(futures):
                    key = futures[fut]
                    results[key] = fut.result()
                    del pending[key]
                    bar.update()
        except BrokenProcessPool as exc:
            restarts += 1
            crashes.append(f"worker crashed ({exc}); re-running {len(pending)} unfinished episodes")
            print(f"[eval] {crashes[-1]}", file=sys.stderr)
            if restarts > max_restarts:
                raise RuntimeError(f"eval workers crashed {restarts} times; last: {exc}") from exc
    bar.close()
    return [results[(sp.task, sp.seed)] for sp in specs], crashes


def run_ray(specs: list[EpisodeSpec], address: str) -> list[EpisodeResult]:
    """The same pure episode function as Ray tasks on an existing cluster."""
    import ray  # optional: extra "ray", only for --ray-address

    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(max_retries=3)(run_episode)
    refs = [remote.remote(sp) for sp in specs]
    return list(ray.get(refs))


def versions(settings: EvalSettings) -> dict[str, Any]:
    out: dict[str, Any] = {"omni_vla": omni_vla.__version__, "mujoco": mujoco.__version__,
                           "MUJOCO_GL": os.environ.get("MUJOCO_GL"), "renderer": "mujoco.Renderer (offscreen)",
                           "backend": settings.backend, "python": sys.version.split()[0]}
    manifest = settings.bundle_dir / "manifest.json" if settings.bundle_dir else None
    if manifest and manifest.exists():  # which weights: a bundle directory's contents change between releases
        raw = manifest.read_bytes()
        data = json.loads(raw)
        out["bundle_versions"] = data.get("versions")
        out["bundle_manifest_sha256"] = hashlib.sha256(raw).hexdigest()
        out["bundle_checkpoint_sha256"] = (data.get("torch_checkpoint") or {}).get("sha256")
    return out


def preflight(settings: EvalSettings) -> EvalSettings:
    """Fail before any episode: bad bundle, unreachable server. Returns the settings episodes run at (an
    execution horizon of 0 is the bundle's own execute_steps), so the report states what ran."""
    if settings.bundle_dir is not None:
        runtime = shared_runtime(settings.backend, str(settings.bundle_dir), settings.threads)
        problem = missing_cameras(runtime.cameras, robot.CAMERAS, "the simulated robot")
        if problem is not None:
            raise ValueError(f"{settings.bundle_dir}: {problem}")
        if settings.execution_horizon == 0:
            steps = LoopSettings(execution_horizon=0).for_policy(None, runtime.execute_steps).execution_horizon
            settings = settings.model_copy(update={"execution_horizon": steps})
        if settings.execution_horizon > runtime.horizon:
            raise ValueError(f"execution horizon {settings.execution_horizon} is longer than the bundle's chunk "
                             f"length {runtime.horizon} ({settings.bundle_dir}); expected 1..{runtime.horizon}")
    if settings.backend == "openpi" or settings.replan:
        check_server(settings.openpi_url)
    return settings


def evaluate(settings: EvalSettings, workers: int = 1, ray_address: str | None = None,
             out: Path | None = None, videos: int = 0, record_dir: Path | None = None, record_format: str = "hdf5",
             progress: bool = True) -> dict[str, Any]:
    try:
        settings = preflight(settings)
        t0 = time.monotonic()
        specs = episode_specs(settings, videos, out, record_dir, record_format)
        crashes: list[str] = []
        if ray_address:
            results = run_ray(specs, ray_address)
        else:
            results, crashes = run_local(specs, workers, progress)
        wall = time.monotonic() - t0
        report = summarise(results, versions(settings),
                           {**json.loads(settings.model_dump_json()), "workers": workers, "ray": bool(ray_address),
                            "worker_crashes": crashes}, wall)
        if out is not None:
            write_report(out, report, results, title=f"omni_vla evaluation: {settings.backend}")
    finally:
        release_cache()  # in-process runtimes (ExecuTorch's thread pool is process-wide), renderers
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla eval", description=__doc__)
    p.add_argument("--backend", default=NODE.backend, choices=BACKENDS)
    p.add_argument("--bundle", type=Path, default=REPO / "bundles" / "reference")
    p.add_argument("--tasks", nargs="+", default=sorted(TASKS))
    p.add_argument("--episodes", type=positive_int, default=50, help="per task")
    p.add_argument("--seed-base", type=int, default=EVAL_SEED_BASE,
                   help=f"first seed of every task (>= {EVAL_SEED_BASE}); tune settings on other seeds than you report")
    p.add_argument("--strategy", default=EvalSettings.model_fields["strategy"].default,
                   choices=STRATEGIES, help="chunk splicing (default: the node's)")
    p.add_argument("--delay", type=non_negative_int, default=EvalSettings.model_fields["delay_ticks"].default,
                   help="simulated inference delay in ticks (default: the node's, one tick)")
    p.add_argument("--execution-horizon", type=positive_int, default=EvalSettings.model_fields["execution_horizon"].default,
                   help="rows executed per chunk (default: the node's, chosen on validation seeds)")
    p.add_argument("--noise-scale", type=float, default=EvalSettings.model_fields["noise_scale"].default,
                   help="flow sampling temperature (0: deterministic, the default: chosen on validation seeds)")
    p.add_argument("--held-out", action="store_true", help="use each task's held-out instruction")
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS"))
    p.add_argument("--openpi-url", default=None, help="ws://host:port of an OpenPI server")
    p.add_argument("--replan", action="store_true", help="local policy + cloud re-planning on stall")
    p.add_argument("--cloud-latency-ms", type=float, default=300.0)
    p.add_argument("--replan-cadence", type=float, default=0.0, help="seconds between cadence re-plans (0: off)")
    p.add_argument("--videos", type=non_negative_int, default=1, help="mp4s per task (capped)")
    p.add_argument("--record", type=Path, default=None, help="also write every episode here")
    p.add_argument("--record-format", choices=RECORD_FORMATS, default="hdf5",
                   help="hdf5: the demonstration dataset format; mcap: a ROS 2 bag per episode")
    p.add_argument("--out", type=Path, default=Path("reports/eval"))
    p.add_argument("--compare", choices=["backends", "chunking"], default=None,
                   help="every backend (torch/executorch/mnn) or every strategy x delay {0,1,2,4} on the same seeds")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    # Native libraries (MNN) print to fd 1; keep stdout pure JSON by sending fd 1 to stderr meanwhile.
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        return _run(args, saved)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _run(args: argparse.Namespace, saved_stdout: int) -> int:
    try:
        settings = EvalSettings(
            backend=args.backend, bundle_dir=None if args.backend in get_args(Agent) else args.bundle,
            tasks=tuple(args.tasks), episodes=args.episodes, seed_base=args.seed_base, strategy=args.strategy,
            delay_ticks=args.delay, execution_horizon=args.execution_horizon, noise_scale=args.noise_scale,
            held_out=args.held_out, openpi_url=args.openpi_url,
            replan=args.replan, cloud_latency_ms=args.cloud_latency_ms, replan_cadence_s=args.replan_cadence)
        with native_stdout_silenced():  # a refusal is one line: no MNN banner around it
            settings = preflight(settings)
            if args.compare:
                for variant in variants(args.compare, settings).values():
                    preflight(variant)
    except Exception as exc:  # noqa: BLE001 - a bad input is reported before episodes start; a bug propagates
        if not is_user_error(exc):
            raise
        print(f"omni-vla eval: {describe(exc)}", file=sys.stderr)
        return 2
    videos = min(args.videos, 5)
    if args.compare:
        result = compare(args.compare, settings, lambda s, out: evaluate(
            s, args.workers, args.ray_address, out, videos, None), args.out)
        lines = [json.dumps(result)] if args.json else [
            f"{n:14s} {v['successes']:4d}/{v['episodes']:<4d} {100 * v['rate']:5.1f}%  "
            f"CI95 [{100 * v['ci95'][0]:.1f}, {100 * v['ci95'][1]:.1f}]  jerk {v['jerk_mean']:.1f}  "
            f"boundary {v['boundary_jump_mean']:.4f}" for n, v in result["variants"].items()]
        if not args.json and "agree" in result:
            lines.append(f"backends agree within 95% intervals: {result['agree']}   -> {args.out}")
        os.write(saved_stdout, ("\n".join(lines) + "\n").encode())
        return 0
    report = evaluate(settings, args.workers, args.ray_address, args.out, videos, args.record, args.record_format)
    if args.json:
        lines = [json.dumps(report)]
    else:
        lines = [f"{t:22s} {g['successes']:3d}/{g['episodes']:<3d} {100 * g['rate']:5.1f}%  "
                 f"CI95 [{100 * g['ci95'][0]:.1f}, {100 * g['ci95'][1]:.1f}]" for t, g in report["tasks"].items()]
        o = report["overall"]
        lines.append(f"{'overall':22s} {o['successes']:3d}/{o['episodes']:<3d} {100 * o['rate']:5.1f}%   -> {args.out}")
    os.write(saved_stdout, ("\n".join(lines) + "\n").encode())
    return 0
