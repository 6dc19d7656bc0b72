"""Serve any policy over the OpenPI websocket protocol (`omni-vla serve-openpi`).

Same wire behaviour as openpi's WebsocketPolicyServer (openpi `websocket_policy_server.py`): metadata frame first, one
binary msgpack request -> one reply {"actions": [H, D], "server_timing": {...}}, an exception sent
as a TEXT frame (the traceback) followed by close 1011, `GET /healthz` -> 200. `--variant vllm-omni`
speaks vLLM-Omni's dialect instead (bare-array reply, binary {"type": "error"} with the connection
kept open, text "reset successful" for {"endpoint": "reset"}, idle close), so the client can be
tested against both on loopback.

A policy is any object with `infer(obs: dict) -> {"actions": [H, D], ...}`; optional `reset()`
and `metadata`. Before a request reaches the policy it is checked (ObservationCheck): every number
finite, images uint8 [H, W, 3], and (with a robot's limits, as `omni-vla serve-openpi` always has)
the joint state within the joint limits plus a tolerance; a refused request gets the same error
frame as any other malformed one, and non-finite actions are never sent. Inference runs in a worker thread under a lock (policies need not be thread-safe)
so pings and /healthz stay responsive. `latency_s` makes every reply leave no earlier than that
long after its request arrived: the evaluation suite's injected cloud latency.
"""
from __future__ import annotations

import argparse
import asyncio
import errno
import http
import logging
import os
import signal
import ssl
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Sequence

import numpy as np
from websockets.asyncio.server import Request, Response, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from omni_vla.backends import LOOP_BACKENDS
from omni_vla.cloud import codec
from omni_vla.core.perception import ImageRejected, check_image
from omni_vla.inference.policy import BundlePolicy
from omni_vla.policy import KeyMap, Policy
from omni_vla.tools.errors import UsageError, existing_bundle, existing_file, non_negative_float, positive_float, \
    positive_int
from omni_vla_safety.limits import load_joint_limits
from omni_vla_sim import robot
from omni_vla_sim.oracle import ExpertOraclePolicy

log = logging.getLogger("omni_vla_sim.openpi_server")
Variant = Literal["openpi", "vllm-omni"]
VARIANTS = ("openpi", "vllm-omni")


# A measured joint state sits at most sensor noise and controller overshoot beyond its limits (rad; m for
# the gripper); further out it is a corrupt observation, not a pose.
STATE_TOLERANCE = 0.05


class ObservationRejected(ValueError):
    """A request that is not passed to the policy: non-finite numbers, a state beyond the limits, a bad image."""


def _first_non_finite(value: Any, path: str) -> str | None:
    """'key[i] is nan' for the first non-finite number anywhere in `value` (dicts and lists walked), else None."""
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_non_finite(item, f"{path}/{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _first_non_finite(item, f"{path}[{i}]")
            if found:
                return found
    elif isinstance(value, np.ndarray) and value.dtype.kind in "fc":
        bad = ~np.isfinite(value)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return f"{path}{list(idx) if value.ndim else ''} is {value[idx]}"
    elif isinstance(value, (float, np.floating, np.complexfloating)) and not np.isfinite(value):
        return f"{path} is {value}"
    return None


class ObservationCheck:
    """What a request may contain before the policy sees it.

    Always: every number finite, the images (when present) uint8 [H, W, 3] of a sane size. With
    `joint_names` and their limits: the state (when present) has one value per joint, each within
    [min - tolerance, max + tolerance].
    """

    def __init__(self, keys: KeyMap | None = None, joint_names: Sequence[str] = (),
                 lower: Sequence[float] = (), upper: Sequence[float] = (), tolerance: float = STATE_TOLERANCE) -> None:
        if not len(joint_names) == len(lower) == len(upper):
            raise ValueError(f"{len(joint_names)} joint names but {len(lower)}/{len(upper)} lower/upper limits")
        if not 0 <= tolerance < float("inf"):
            raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance}")
        self.keys = keys or KeyMap()
        self.joint_names = tuple(joint_names)
        self.lower = np.asarray(lower, np.float64) - tolerance
        self.upper = np.asarray(upper, np.float64) + tolerance
        self.tolerance = tolerance

    @classmethod
    def for_robot(cls, limits_file: str | Path, joint_names: Sequence[str], keys: KeyMap | None = None,
                  tolerance: float = STATE_TOLERANCE) -> "ObservationCheck":
        """Limits of `joint_names` from a joint-limits file (YAML, URDF or MJCF); a joint missing from it is refused."""
        limits = load_joint_limits(limits_file)
        missing = [j for j in joint_names if j not in limits]
        if missing:
            raise ValueError(f"{limits_file}: no limits for joints {missing} (the policy's joints: {list(joint_names)})")
        return cls(keys, joint_names, [limits[j].min_position for j in joint_names],
                   [limits[j].max_position for j in joint_names], tolerance)

    def __call__(self, obs: dict) -> None:
        """Raise ObservationRejected naming the first thing wrong with `obs`."""
        bad = _first_non_finite(obs, "")
        if bad:
            raise ObservationRejected(f"{bad}: every number in a request must be finite")
        for key in self.keys.images.values():
            if key in obs:
                try:
                    check_image(obs[key])
                except ImageRejected as exc:
                    raise ObservationRejected(f"{key}: {exc}") from None
        if self.keys.state in obs:
            self._check_state(obs[self.keys.state])

    def _check_state(self, value: Any) -> None:
        key = self.keys.state
        try:
            state = np.asarray(value, np.float64)
        except (TypeError, ValueError):
            raise ObservationRejected(f"{key}: expected an array of joint positions, got {type(value).__name__}") from None
        if state.ndim != 1:
            raise ObservationRejected(f"{key}: shape {state.shape}, expected one value per joint")
        if not self.joint_names:
            return
        if state.shape[0] != len(self.joint_names):
            raise ObservationRejected(f"{key}: {state.shape[0]} values, expected {len(self.joint_names)} "
                                      f"({', '.join(self.joint_names)})")
        out = np.flatnonzero((state < self.lower) | (state > self.upper))
        if out.size:
            i = int(out[0])
            lo, hi = self.lower[i] + self.tolerance, self.upper[i] - self.tolerance
            raise ObservationRejected(f"{key}[{i}] ({self.joint_names[i]}) = {state[i]:g} is outside the joint's limits "
                                      f"[{lo:g}, {hi:g}] by more than {self.tolerance:g}")


def check_actions(result: Any) -> None:
    """Never send a non-finite action: a client may forward it to a robot unchecked."""
    actions = result.get("actions") if isinstance(result, dict) else result
    if actions is not None and not np.isfinite(np.asarray(actions, np.float64)).all():
        raise ValueError("the policy returned non-finite actions; not sent")


Handler = Callable[[ServerConnection], Awaitable[None]]
ProcessRequest = Callable[[ServerConnection, Request], Response | None]


class ServerThread:
    """A websockets server on its own event loop in a daemon thread (in-process serving, tests)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0,
                 process_request: ProcessRequest | None = None, ssl_context: ssl.SSLContext | None = None,
                 max_size: int | None = None) -> None:
        self._args = (handler, host, port)
        self._kwargs = dict(process_request=process_request, ssl=ssl_context, max_size=max_size, compression=None)
        self.host, self.port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 5.0) -> "ServerThread":
        self._thread = threading.Thread(target=self._main, name="openpi-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"server did not start within {timeout} s")
        if self._error is not None:
            raise RuntimeError(f"server failed to start on {self.host}:{self.port}: {self._error}") from self._error
        return self

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(); the thread just ends
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        handler, host, port = self._args
        async with serve(handler, host, port, **self._kwargs) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop.wait()
            server.close(close_connections=True)
            await server.wait_closed()

    @property
    def uri(self) -> str:
        scheme = "wss" if self._kwargs["ssl"] is not None else "ws"
        return f"{scheme}://{self.host}:{self.port}"

    def stop(self, timeout: float = 5.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "ServerThread":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PolicyServer:
    """The OpenPI protocol around one policy object."""

    def __init__(self, policy: Policy, *, metadata: dict | None = None, latency_s: float = 0.0,
                 variant: Variant = "openpi", api_key: str | None = None, idle_timeout_s: float | None = None,
                 check: ObservationCheck | None = None) -> None:
        """`check`: what requests must satisfy (default: finite numbers and well-formed images, no joint limits)."""
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        self.policy = policy
        self.metadata = dict(metadata if metadata is not None else policy.metadata)
        self.latency_s = latency_s
        self.variant = variant
        self.api_key = api_key
        self.idle_timeout_s = idle_timeout_s
        self.check = check or ObservationCheck()
        self._lock = threading.Lock()
        self.connections = 0  # accepted websocket connections (tests read it)
        self.requests = 0

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """/healthz -> 200 (no auth: load balancers probe it); otherwise check the API key."""
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self.api_key is not None and request.headers.get("Authorization") != f"Api-Key {self.api_key}":
            return connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong Api-Key\n")
        return None

    def _infer(self, obs: dict) -> dict:
        with self._lock:
            return self.policy.infer(obs)

    def _reset(self) -> None:
        with self._lock:
            self.policy.reset()

    async def _recv(self, ws: ServerConnection) -> Any:
        if self.idle_timeout_s is None:
            return await ws.recv()
        return await asyncio.wait_for(ws.recv(), self.idle_timeout_s)

    async def handler(self, ws: ServerConnection) -> None:
        self.connections += 1
        await ws.send(codec.packb(self.metadata))
        while True:
            try:
                msg = await self._recv(ws)
            except ConnectionClosed:
                return
            except asyncio.TimeoutError:
                await ws.close(CloseCode.NORMAL_CLOSURE, f"idle for {self.idle_timeout_s:g} s")
                return
            arrived = time.monotonic()
            try:
                if isinstance(msg, str):
                    raise ValueError("expected a binary msgpack request, got a text frame")
                obs = codec.unpackb(msg)
                if not isinstance(obs, dict):
                    raise ValueError(f"request must be a map, got {type(obs).__name__}")
                if obs.get("endpoint") == "reset":
                    await asyncio.to_thread(self._reset)
                    if self.variant == "vllm-omni":
                        await ws.send("reset successful")
                    else:
                        await ws.send(codec.packb({"reset": True}))
                    continue
                self.requests += 1
                self.check(obs)
                result = await asyncio.to_thread(self._infer, obs)
                check_actions(result)
                infer_ms = 1e3 * (time.monotonic() - arrived)
                wait = self.latency_s - (time.monotonic() - arrived)
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.variant == "vllm-omni":
                    reply: Any = result["actions"]
                else:
                    reply = dict(result)
                    reply["server_timing"] = {"infer_ms": infer_ms, "injected_latency_ms": 1e3 * self.latency_s}
                await ws.send(codec.packb(reply))
            except ConnectionClosed:
                return
            except Exception:
                tb = traceback.format_exc()
                log.warning("request failed: %s", tb.strip().splitlines()[-1])
                try:
                    if self.variant == "vllm-omni":
                        await ws.send(codec.packb({"type": "error", "message": tb}))
                        continue
                    await ws.send(tb)
                    await ws.close(CloseCode.INTERNAL_ERROR, "Internal server error. Traceback included in previous frame.")
                except ConnectionClosed:
                    pass
                return

    def thread(self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None) -> ServerThread:
        """A not-yet-started ServerThread serving this policy (call .start())."""
        return ServerThread(self.handler, host, port, process_request=self.process_request,
                            ssl_context=ssl_context, max_size=64 << 20)

    async def serve_forever(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None,
                            stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        async with serve(self.handler, host, port, process_request=self.process_request, ssl=ssl_context,
                         compression=None, max_size=64 << 20) as server:
            bound = next(iter(server.sockets)).getsockname()
            scheme = "wss" if ssl_context else "ws"
            print(f"serving {type(self.policy).__name__} ({self.variant}) on {scheme}://{bound[0]}:{bound[1]}"
                  f" latency {1e3 * self.latency_s:g} ms; health: http{'s' if ssl_context else ''}://"
                  f"{bound[0]}:{bound[1]}/healthz", flush=True)
            await stop.wait()


def _camera_key(text: str) -> tuple[str, str]:
    camera, sep, key = text.partition("=")
    if not sep or not camera or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected CAMERA=KEY, e.g. top=observation/images/top")
    return camera, key


def build_policy(args: argparse.Namespace) -> Policy:
    """The policy named on the command line."""
    if args.policy == "oracle":
        if args.camera_key:
            raise UsageError("--camera-key applies to --policy bundle; the oracle reads the simulator's state")
        return ExpertOraclePolicy(horizon=args.horizon, privileged_key=args.privileged_key)
    if not args.bundle_dir:
        raise UsageError("--policy bundle needs --bundle-dir")
    cameras = [camera for camera, _ in args.camera_key]
    if len(set(cameras)) != len(cameras):
        raise UsageError(f"--camera-key names a camera twice ({cameras}); expected one key per camera")
    keys = KeyMap(images=dict(args.camera_key)) if args.camera_key else None
    return BundlePolicy(args.bundle_dir, backend=args.backend, threads=args.threads, keys=keys)


def build_check(args: argparse.Namespace, policy: Policy) -> ObservationCheck:
    """The robot's joint limits for the policy's joints (the bundle's, or the simulated Panda's for the oracle)."""
    runtime = getattr(policy, "runtime", None)
    joints = list(runtime.joint_names) if runtime is not None and runtime.joint_names else list(robot.JOINT_NAMES)
    return ObservationCheck.for_robot(args.joint_limits, joints, keys=getattr(policy, "keys", None),
                                      tolerance=args.state_tolerance)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="omni-vla serve-openpi", description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", choices=("oracle", "bundle"), default="oracle",
                   help="oracle: the privileged scripted expert (needs 'privileged/sim_state' in requests)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--latency-ms", type=non_negative_float, default=0.0,
                   help="replies leave no earlier than this after the request")
    p.add_argument("--variant", choices=VARIANTS, default="openpi")
    p.add_argument("--horizon", type=positive_int, default=16, help="oracle: actions per plan")
    p.add_argument("--privileged-key", default="privileged/sim_state")
    p.add_argument("--bundle-dir", type=existing_bundle, default=None)
    p.add_argument("--backend", choices=LOOP_BACKENDS, default="mnn")
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--camera-key", type=_camera_key, action="append", default=[], metavar="CAMERA=KEY",
                   help="bundle: the request key of one of its cameras (repeatable; default "
                        f"{','.join(f'{c}={k}' for c, k in KeyMap().images.items())})")
    p.add_argument("--joint-limits", type=existing_file, default=robot.DEFAULT_LIMITS_FILE,
                   help="joint-limits file (YAML, URDF or MJCF); requests whose state is beyond it are refused")
    p.add_argument("--state-tolerance", type=non_negative_float, default=STATE_TOLERANCE,
                   help="how far beyond a joint limit a state may be (rad, m) before the request is refused")
    p.add_argument("--api-key-env", default="", help="require 'Authorization: Api-Key $VAR'")
    p.add_argument("--idle-timeout-s", type=positive_float, default=None, help="close idle connections (vLLM-Omni: 30)")
    p.add_argument("--certfile", type=existing_file, default=None,
                   help="serve wss:// with this certificate chain (PEM)")
    p.add_argument("--keyfile", type=existing_file, default=None)
    args = p.parse_args(argv)
    if not 0 <= args.port < 65536:
        p.error(f"argument --port: must be in 0..65535 (got {args.port})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
    ctx = None
    if args.certfile:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(args.certfile, args.keyfile)
        except ssl.SSLError as exc:
            raise UsageError(f"--certfile {args.certfile} / --keyfile {args.keyfile}: not a usable certificate "
                             f"chain and key ({exc.reason or exc})") from exc
    policy = build_policy(args)
    server = PolicyServer(policy, latency_s=args.latency_ms / 1e3, variant=args.variant,
                          api_key=api_key, idle_timeout_s=args.idle_timeout_s, check=build_check(args, policy))

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await server.serve_forever(args.host, args.port, ctx, stop)

    try:
        asyncio.run(run())
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        why = os.strerror(exc.errno).lower()
        raise UsageError(f"--host {args.host} --port {args.port}: cannot listen there ({why})") from exc
    return 0


if __name__ == "__main__":
    sys.exit(main())
