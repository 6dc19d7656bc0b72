"""vla_node's ROS side of cloud re-planning: explicit requests in, supervisor interventions in, status out.

The Replanner (omni_vla.cloud) does the work outside the tick; this adapter only turns ROS
messages into its thread-safe calls: a String on `replan_request` or a Trigger on
`request_plan_service` asks for a plan, and increases of the safety supervisor's intervention
counters feed the "repeated interventions" trigger. They are read from its /diagnostics (parsed in
omni_vla.ros.diagnostics): the JSON status it also publishes (status_topic) is not in the interface
contract and vla_node has no topic parameter for it.
"""
from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import Trigger

from omni_vla.cloud import Replanner
from omni_vla.core.settings import VlaNodeConfig
from omni_vla.ros.diagnostics import InterventionCounter

SUPERVISOR_STATUS = "safety_supervisor"


class ReplanIO:
    """Subscriptions and the service that drive a Replanner from ROS (executor thread only)."""

    def __init__(self, node: Any, cfg: VlaNodeConfig, replanner: Replanner) -> None:
        self.node = node
        self.replanner = replanner
        self.interventions = InterventionCounter(cfg.replan_intervention_kinds)
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
            if SUPERVISOR_STATUS in status.name:
                for _ in range(self.interventions.new((kv.key, kv.value) for kv in status.values)):
                    self.replanner.note_intervention()

    def set_kinds(self, kinds: list[str]) -> None:
        """A live change of replan_intervention_kinds: counting restarts from the next supervisor status."""
        self.interventions = InterventionCounter(kinds)

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
