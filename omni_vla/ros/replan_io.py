"""vla_node's ROS side of cloud re-planning: explicit requests in, supervisor interventions in, status out.

The Replanner (omni_vla.cloud) does the work outside the tick; this adapter only turns ROS
messages into its thread-safe calls: a String on `replan_request` or a Trigger on
`request_plan_service` asks for a plan, and increases of the safety supervisor's intervention
counters (read from its /diagnostics, so the supervisor stays independent of this package) feed the
"repeated interventions" trigger.
"""
from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from omni_vla.core.settings import VlaNodeConfig
from omni_vla.cloud import Replanner, load_replan_config

SUPERVISOR_STATUS = "safety_supervisor"
COUNTER_PREFIX = "interventions/"


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


class ReplanIO:
    """Subscriptions and the service that drive a Replanner from ROS (executor thread only)."""

    def __init__(self, node: Any, cfg: VlaNodeConfig, replanner: Replanner) -> None:
        self.node = node
        self.replanner = replanner
        self.kinds = {COUNTER_PREFIX + k for k in cfg.replan_intervention_kinds}
        self._seen: int | None = None
        self.explicit_requests = 0
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        t = cfg.topics
        self.subs = [
            node.create_subscription(String, t.replan_request, self._on_request, reliable),
            node.create_subscription(DiagnosticArray, t.diagnostics, self._on_diagnostics, 10),
        ]
        self.service = node.create_service(Trigger, t.request_plan_service, self._on_service)

    def _on_request(self, msg: String) -> None:
        self.explicit_requests += 1
        self.replanner.request_plan(msg.data.strip() or "explicit")
        self.node.get_logger().info(f"re-plan requested on topic: {msg.data!r}")

    def _on_service(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.explicit_requests += 1
        self.replanner.request_plan("service")
        response.success = True
        response.message = "re-plan requested" + ("" if self.replanner.connected else " (server not connected yet)")
        return response

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if SUPERVISOR_STATUS not in status.name:
                continue
            total = 0
            for kv in status.values:
                if kv.key in self.kinds:
                    try:
                        total += int(kv.value)
                    except ValueError:
                        continue
            if self._seen is not None and total > self._seen:
                for _ in range(min(total - self._seen, 16)):
                    self.replanner.note_intervention()
            self._seen = total

    def set_kinds(self, kinds: list[str]) -> None:
        """A live change of replan_intervention_kinds: counting restarts from the next supervisor status."""
        self.kinds = {COUNTER_PREFIX + k for k in kinds}
        self._seen = None

    def diagnostics(self) -> dict[str, Any]:
        st = self.replanner.status()
        return {"cloud_connected": st["connected"], "cloud_busy": st["busy"], "cloud_requests": st["requests"],
                "cloud_plans_validated": st["plans"], "cloud_rejected": st["rejected"],
                "cloud_explicit_requests": self.explicit_requests, "cloud_last_error": st["last_error"],
                "cloud_last_rejection": st["last_rejection"]}

    def destroy(self) -> None:
        for sub in self.subs:
            self.node.destroy_subscription(sub)
        self.node.destroy_service(self.service)
        self.subs = []
