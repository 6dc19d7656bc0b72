"""A remote OpenPI server as a `omni_vla.policy.Policy`: blocking infer/reset over one connection.

For serving chains, tools and evaluation, where one call per chunk is the unit (openpi-client's
WebsocketClientPolicy plays this role upstream). The robot's re-planner does not use it: it runs
the async client off the control thread (omni_vla.cloud.replanner). The event loop lives in a
daemon thread, so callers stay synchronous and every wait is bounded by the client's config.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine

import numpy as np

from omni_vla.cloud.client import OpenPIClient, ProtocolError
from omni_vla.cloud.config import ClientConfig


class CloudPolicy:
    """infer(obs) -> {"actions": float32 [H, D]} from the server; metadata is the server's first frame."""

    def __init__(self, config: ClientConfig, api_key: str | None = None) -> None:
        self.config = config
        self._client = OpenPIClient(config, api_key=api_key)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cloud_policy", daemon=True)
        self._thread.start()
        self.metadata: dict[str, Any] = self._run(self._client.connect())

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        bound = self.config.open_timeout_s + self.config.request_timeout_s
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=bound)

    def infer(self, obs: dict) -> dict:
        """One request; a reply without a finite [H, D] "actions" array is a ProtocolError."""
        if not self._client.connected:
            self.metadata = self._run(self._client.connect())
        reply = self._run(self._client.infer(obs))
        actions = reply.get("actions") if isinstance(reply, dict) else reply
        actions = np.asarray(actions, dtype=np.float32) if actions is not None else None
        if actions is None or actions.ndim != 2 or not np.isfinite(actions).all():
            raise ProtocolError("reply has no finite 2-D 'actions' array")
        out = dict(reply) if isinstance(reply, dict) else {}
        out["actions"] = actions
        return out

    def reset(self) -> None:
        """openpi keeps no per-episode state; vLLM-Omni's sessions are reset explicitly."""
        if self.config.protocol == "vllm-omni" and self._client.connected:
            self._run(self._client.reset())

    def close(self) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(2.0)
