"""Async websocket client for the OpenPI policy protocol (openpi's server and vLLM-Omni's variant).

Protocol (openpi `websocket_policy_server.py`): after the handshake the server sends a
msgpack metadata dict; then strictly one binary request, one reply. openpi replies
{"actions": [H, D], "server_timing": ...} and reports an exception as a TEXT frame (traceback)
followed by close 1011. vLLM-Omni (`/v1/realtime/robot/openpi`) may reply with a bare array,
reports errors as binary {"type": "error", "message": ...} and keeps the connection open, closes
idle connections after ~30 s and accepts {"endpoint": "reset"} requests.

One connection at a time, used by one task; every wait is bounded by the config. Reconnection
with exponential backoff lives here too (`connect_with_backoff`), so a missing server never
raises into the caller, it only delays the next plan.
"""
from __future__ import annotations

import asyncio
import logging
import random
import ssl
from typing import Any, Callable

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from omni_vla.cloud import codec
from omni_vla.cloud.config import ClientConfig

log = logging.getLogger("omni_vla.cloud.client")
MAX_ERROR_CHARS = 2000


class OpenPIError(RuntimeError):
    """Base class: the exchange failed; the message says how."""


class ServerError(OpenPIError):
    """The server reported an error for a request."""

    def __init__(self, message: str, connection_kept: bool) -> None:
        super().__init__(message)
        self.connection_kept = connection_kept


class ProtocolError(OpenPIError):
    """The server sent something the protocol does not allow (garbage, wrong frame type)."""


def ssl_context_for(config: ClientConfig) -> ssl.SSLContext | None:
    """TLS for wss://: verification on unless explicitly turned off; optional extra CA file."""
    if not config.uri.startswith("wss://"):
        return None
    ctx = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
    if not config.verify_tls:
        log.warning("TLS certificate verification is OFF for %s: only acceptable on a test bench", config.uri)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def backoff_delays(initial: float, maximum: float, rng: random.Random | None = None):
    """initial, 2x, 4x ... capped at maximum, each with +-20 % jitter so robots do not reconnect in step."""
    rng = rng or random.Random()
    delay = initial
    while True:
        yield delay * rng.uniform(0.8, 1.2)
        delay = min(maximum, delay * 2.0)


class OpenPIClient:
    """One OpenPI connection: connect (metadata first), infer, reset, close."""

    def __init__(self, config: ClientConfig, api_key: str | None = None) -> None:
        self.config = config
        self._api_key = api_key if api_key is not None else config.api_key()
        self._ssl = ssl_context_for(config)
        self._ws: ClientConnection | None = None
        self.metadata: dict = {}

    @property
    def connected(self) -> bool:
        ws = self._ws
        return ws is not None and ws.close_code is None and ws.state.name == "OPEN"

    @property
    def connection(self) -> ClientConnection | None:
        return self._ws

    async def connect(self) -> dict:
        """Open the connection and read the metadata frame; raises on any failure."""
        await self.close()
        cfg = self.config
        headers = {"Authorization": f"Api-Key {self._api_key}"} if self._api_key else None
        ws = await connect(
            cfg.uri,
            compression=None,
            max_size=cfg.max_message_bytes,
            additional_headers=headers,
            open_timeout=cfg.open_timeout_s,
            ping_interval=cfg.ping_interval_s,
            ping_timeout=cfg.ping_timeout_s,
            close_timeout=1.0,
            proxy=cfg.proxy,
            ssl=self._ssl,
        )
        try:
            first = await asyncio.wait_for(ws.recv(), cfg.open_timeout_s)
            if isinstance(first, str):
                raise ProtocolError(f"expected a binary metadata frame first, got text: {first[:200]!r}")
            try:
                metadata = codec.unpackb(first)
            except codec.CodecError as exc:
                raise ProtocolError(f"metadata frame is not valid msgpack: {exc}") from exc
            if not isinstance(metadata, dict):
                raise ProtocolError(f"metadata must be a map, got {type(metadata).__name__}")
        except BaseException:
            await ws.close()
            raise
        self._ws, self.metadata = ws, metadata
        return metadata

    async def connect_with_backoff(
        self, stop: asyncio.Event, on_failure: Callable[[str], None] | None = None
    ) -> dict | None:
        """Retry `connect` with exponential backoff until it works (metadata) or `stop` is set (None)."""
        delays = backoff_delays(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not stop.is_set():
            try:
                return await self.connect()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # refused, DNS, TLS, HTTP 401/404, timeout, bad metadata: all retried
                reason = f"{type(exc).__name__}: {exc}"
                if on_failure is not None:
                    on_failure(reason)
            try:
                await asyncio.wait_for(stop.wait(), next(delays))
            except asyncio.TimeoutError:
                pass
        return None

    async def _send_recv(self, message: dict) -> str | bytes:
        ws = self._ws
        if ws is None:
            raise OpenPIError("not connected")
        await ws.send(codec.packb(message))
        try:
            return await asyncio.wait_for(ws.recv(), self.config.request_timeout_s)
        except asyncio.TimeoutError:
            await self.close()  # a late reply would be taken for the next request's: start clean
            raise OpenPIError(f"no reply within request_timeout_s={self.config.request_timeout_s:g} s") from None

    async def _text_error(self, text: str) -> ServerError:
        detail = text[-MAX_ERROR_CHARS:]
        if self.config.protocol == "openpi":
            await self.close()  # openpi closes with 1011 after the traceback; do not race it
            return ServerError(f"server error (connection closed):\n{detail}", connection_kept=False)
        return ServerError(f"server error:\n{detail}", connection_kept=True)

    async def infer(self, obs: dict) -> Any:
        """Send one observation; return the decoded reply (dict or array), unvalidated.

        Raises ServerError (server-side failure), ProtocolError (garbage), OpenPIError (timeout),
        websockets ConnectionClosed (dropped, including frames over max_message_bytes: close 1009).
        """
        reply = await self._send_recv(obs)
        if isinstance(reply, str):
            raise await self._text_error(reply)
        try:
            decoded = codec.unpackb(reply)
        except codec.CodecError as exc:
            await self.close()  # framing is lost: what follows cannot be trusted either
            raise ProtocolError(f"reply refused: {exc}") from exc
        if isinstance(decoded, dict) and decoded.get("type") == "error":
            message = str(decoded.get("message", ""))[:MAX_ERROR_CHARS]
            raise ServerError(f"server error: {message}", connection_kept=True)
        return decoded

    async def reset(self, fields: dict | None = None) -> None:
        """vLLM-Omni's {"endpoint": "reset"}: drop the server's per-session state (new episode)."""
        reply = await self._send_recv({"endpoint": "reset", **(fields or {})})
        if isinstance(reply, str):
            if "reset" in reply.lower() and "error" not in reply.lower() and "traceback" not in reply.lower():
                return  # vLLM-Omni acknowledges with the text "reset successful"
            raise await self._text_error(reply)
        try:
            decoded = codec.unpackb(reply)
        except codec.CodecError as exc:
            await self.close()
            raise ProtocolError(f"reset reply refused: {exc}") from exc
        if isinstance(decoded, dict) and decoded.get("type") == "error":
            raise ServerError(f"reset failed: {decoded.get('message', '')}", connection_kept=True)

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await ws.close()
            except (ConnectionClosed, OSError):
                pass
