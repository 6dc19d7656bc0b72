"""The network side of re-planning: one OpenPI connection, one request at a time, replies validated.

`PlanNetwork` runs on its own asyncio loop: connect with backoff, send the newest pending request
(resizing its images first), validate the reply, and report everything to a sink (the Replanner's
tick side) as events. It is hosted in a child process or a thread (omni_vla.cloud.hosts).

Nothing unvalidated leaves this module: a reply is parsed and checked here, and only a read-only
float64 [T, D] array reaches the sink. The tick's process never imports this module (it loads
websockets, msgpack and cv2): hosts.py loads it by name in the process that runs the network side.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

import cv2
import numpy as np
from websockets.exceptions import ConnectionClosed

from omni_vla.cloud import codec
from omni_vla.cloud.client import OpenPIClient, OpenPIError, ServerError
from omni_vla.cloud.messages import LOST, Request, Sink
from omni_vla.cloud.plan import PlanRejected, extract_actions, validate_actions

log = logging.getLogger("omni_vla.cloud.network")
CLOSE_TOO_BIG = 1009
__all__ = ["CLOSE_TOO_BIG", "LOST", "PlanNetwork", "Request", "Sink"]


class PlanNetwork:
    """One connection's worth of re-planning work on an asyncio loop (see module docstring)."""

    def __init__(self, config: Any, api_key: str | None, sink: Sink) -> None:
        self.config = config
        self.sink = sink
        self._client = OpenPIClient(config.client, api_key=api_key)
        self._pending: Request | None = None
        self._gen = 0
        self._reset_pending = False
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()

    # ----- called on the loop (hosts use call_soon_threadsafe) -------------------------------
    def submit(self, req: Request) -> None:
        """The newest request replaces one not yet sent (its reply would be older anyway)."""
        if req.gen < self._gen:
            return
        self._gen = req.gen
        if self._pending is not None:
            self.sink.on_finished(self._pending.request_id)
        self._pending = req
        self._wake.set()

    def cancel(self, gen: int, reset: bool = False) -> None:
        """A new instruction or episode: drop what is pending; vLLM-Omni also gets a reset."""
        self._gen = max(self._gen, gen)
        if self._pending is not None and self._pending.gen < self._gen:
            self.sink.on_finished(self._pending.request_id)
            self._pending = None
        if reset and self.config.client.protocol == "vllm-omni":
            self._reset_pending = True
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # ----- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        uri = self.config.client.uri
        while not self._stop.is_set():
            md = await self._client.connect_with_backoff(
                self._stop, lambda why: self.sink.on_event("connect_failures", f"cannot connect to {uri}: {why}", logging.INFO))
            if md is None:
                break
            self.sink.on_connected(md)
            try:
                await self._serve()
            except ConnectionClosed as exc:
                self.sink.on_event("disconnects", f"connection to {uri} closed: {exc}")
            except ServerError as exc:
                self.sink.on_event("server_errors", str(exc))
            except OpenPIError as exc:
                self.sink.on_event("timeouts" if "request_timeout_s" in str(exc) else "protocol_errors", str(exc))
            except OSError as exc:
                self.sink.on_event("disconnects", f"network error: {exc}")
            except Exception as exc:  # keep the network side alive whatever happens; say what
                self.sink.on_event("protocol_errors", f"unexpected {type(exc).__name__}: {exc}", logging.ERROR)
            finally:
                await self._client.close()
                self.sink.on_disconnected()
        await self._client.close()

    async def _serve(self) -> None:
        while not self._stop.is_set():
            if self._reset_pending:
                self._reset_pending = False
                try:
                    await self._client.reset(dict(self.config.extra_fields))
                    self.sink.on_event("resets", level=logging.DEBUG)
                except ServerError as exc:
                    if not exc.connection_kept:
                        raise
                    self.sink.on_event("server_errors", str(exc))
                continue
            req = await self._next_request()
            if req is None:
                if self._client.connected and not self._stop.is_set():
                    continue  # a reset to send first
                return
            await self._exchange(req)

    async def _next_request(self) -> Request | None:
        """The pending request, or None if the connection closed, a reset is due, or we stop."""
        ws = self._client.connection
        assert ws is not None
        closed = asyncio.ensure_future(ws.wait_closed())
        try:
            while not self._stop.is_set():
                if self._reset_pending:
                    return None
                req, self._pending = self._pending, None
                if req is not None:
                    if time.perf_counter() - req.wall <= self.config.max_plan_age_s:
                        return req
                    self.sink.on_event("expired", f"request {req.request_id} expired before it could be sent",
                                       logging.INFO)
                    self.sink.on_finished(req.request_id)
                    continue
                self._wake.clear()
                waiter = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({waiter, closed}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if closed.done():
                    if self._pending is not None:
                        return None
                    raise ws.protocol.close_exc
            return None
        finally:
            closed.cancel()

    def _prepared(self, payload: dict) -> dict:
        size = self.config.image_size
        if size:
            keys = self.config.keys
            for key in keys.images.values():
                img = payload[key]
                if img.shape[:2] != (size, size):
                    payload[key] = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
        return payload

    async def _exchange(self, req: Request) -> None:
        requeued = False
        self.sink.on_sent(req.request_id)
        try:
            try:
                reply = await self._client.infer(self._prepared(req.payload or {}))
            except codec.CodecError as exc:
                self.sink.on_event("bad_observations", f"request {req.request_id} not encodable: {exc}", logging.ERROR)
                return
            except ConnectionClosed as exc:
                if exc.sent is not None and exc.sent.code == CLOSE_TOO_BIG:
                    self.sink.on_event("rejected", f"request {req.request_id}: reply larger than max_message_bytes="
                                       f"{self.config.client.max_message_bytes}", rejection=True)
                elif self._pending is None and req.gen == self._gen:
                    self._pending, requeued = req, True  # send again on the next connection
                raise
            except ServerError as exc:
                if not exc.connection_kept:
                    raise
                self.sink.on_event("server_errors", f"request {req.request_id}: {exc}")
                return
            self.sink.on_event("replies", level=logging.DEBUG)
            try:
                raw, timing = extract_actions(reply)
                actions = validate_actions(raw, self.config.action_dim, self.config.max_horizon)
            except PlanRejected as exc:
                self.sink.on_event("rejected", f"request {req.request_id}: {exc}", rejection=True)
                return
            actions = np.array(actions, dtype=np.float64, copy=True)
            actions.flags.writeable = False
            self.sink.on_result(replace(req, payload=None), actions, time.perf_counter() - req.wall, timing)
        finally:
            self.sink.on_finished(req.request_id, still_pending=requeued)


