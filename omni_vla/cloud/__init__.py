"""Robot side of the OpenPI websocket protocol: codec, client, network process, plan validation, re-planner.

The re-planner asks a large policy for a new plan asynchronously; nothing here runs inside the tick.
Entry point: `Replanner` (config/openpi.yaml -> `load_replan_config`).
"""
from omni_vla.cloud.config import ReplanConfig, load_replan_config
from omni_vla.cloud.plan import PlanRejected, ValidatedPlan
from omni_vla.cloud.replanner import Replanner

__all__ = ["PlanRejected", "ReplanConfig", "Replanner", "ValidatedPlan", "load_replan_config"]
