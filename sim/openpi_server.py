"""Serve any policy over the OpenPI websocket protocol (`omni-vla serve-openpi`).

Same wire behaviour as openpi's WebsocketPolicyServer (openpi `websocket_policy_server.py`): metadata frame first, one
binary msgpack request -> one reply {"actions": [H, D], "server_timing": {...}}, an exception sent
as a TEXT frame (the traceback) followed by close 1011, `GET /healthz` -> 200. `--variant vllm-omni`
speaks vLLM-Omni's dialect instead (bare-array reply, binary {"type": "error"} with the connection
kept open, text "reset successful" for {"endpoint": "reset"}, idle close), so the client can be
tested against both on loopback.

A policy is any object with `infer(obs: dict) -> {"actions": [H, D], ...}`; optional `reset()`
and `metadata`. Inference runs in a worker thread under a lock (policies need not be thread-safe)
so pings and /healthz stay responsive. `latency_s` makes every reply leave no earlier than that
long after its request arrived: the evaluation suite's injected cloud latency.
"""
from __future__ import annotations

import argparse
import asyncio
import http
import logging
import os
import signal
import ssl
import sys
import threading
import time
import traceback
from typing import Any, Awaitable, Callable, Literal

from websockets.asyncio.server import Request, Response, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from omni_vla.cloud import codec
from omni_vla.inference.policy import BundlePolicy
from omni_vla.policy import Policy
from omni_vla_sim.oracle import ExpertOraclePolicy

log = logging.getLogger("omni_vla_sim.openpi_server")
Variant = Literal["openpi", "vllm-omni"]
VARIANTS = ("openpi", "vllm-omni")


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
                 variant: Variant = "openpi", api_key: str | None = None, idle_timeout_s: float | None = None) -> None:
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
                result = await asyncio.to_thread(self._infer, obs)
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


def build_policy(args: argparse.Namespace) -> Policy:
    """The policy named on the command line."""
    if args.policy == "oracle":
        return ExpertOraclePolicy(horizon=args.horizon, privileged_key=args.privileged_key)
    if not args.bundle_dir:
        raise SystemExit("serve-openpi: --policy bundle needs --bundle-dir")
    return BundlePolicy(args.bundle_dir, backend=args.backend, threads=args.threads)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="omni-vla serve-openpi", description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", choices=("oracle", "bundle"), default="oracle",
                   help="oracle: the privileged scripted expert (needs 'privileged/sim_state' in requests)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--latency-ms", type=float, default=0.0, help="replies leave no earlier than this after the request")
    p.add_argument("--variant", choices=VARIANTS, default="openpi")
    p.add_argument("--horizon", type=int, default=16, help="oracle: actions per plan")
    p.add_argument("--privileged-key", default="privileged/sim_state")
    p.add_argument("--bundle-dir", default="")
    p.add_argument("--backend", choices=("mnn", "executorch", "onnx"), default="mnn")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--api-key-env", default="", help="require 'Authorization: Api-Key $VAR'")
    p.add_argument("--idle-timeout-s", type=float, default=None, help="close idle connections (vLLM-Omni: 30)")
    p.add_argument("--certfile", default="", help="serve wss:// with this certificate chain (PEM)")
    p.add_argument("--keyfile", default="")
    args = p.parse_args(argv)
    if args.latency_ms < 0 or args.horizon < 1 or not 0 <= args.port < 65536:
        p.error("--latency-ms must be >= 0, --horizon >= 1, --port in 0..65535")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            print(f"serve-openpi: environment variable {args.api_key_env} is empty", file=sys.stderr)
            return 2
    ctx = None
    if args.certfile:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.certfile, args.keyfile or None)
    server = PolicyServer(build_policy(args), latency_s=args.latency_ms / 1e3, variant=args.variant,
                          api_key=api_key, idle_timeout_s=args.idle_timeout_s)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await server.serve_forever(args.host, args.port, ctx, stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
