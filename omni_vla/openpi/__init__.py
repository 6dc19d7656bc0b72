"""OpenPI websocket protocol: codec, re-planning client, and a server for simulation.

Robot side: `Replanner` (config/openpi.yaml -> `load_replan_config`). Server side:
`omni_vla.openpi.server.main` (`omni-vla serve-openpi`). Nothing here imports torch or MuJoCo at
module level (the oracle imports the simulator only when it is used).
"""
from omni_vla.openpi.config import ReplanConfig, load_replan_config
from omni_vla.openpi.plan import PlanRejected, ValidatedPlan
from omni_vla.openpi.replanner import Replanner

__all__ = ["PlanRejected", "ReplanConfig", "Replanner", "ValidatedPlan", "load_replan_config"]
