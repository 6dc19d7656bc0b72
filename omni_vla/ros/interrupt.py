"""Stop-signal handling of the project's node processes, shared with the supervisor (omni_vla_safety.interrupt)."""
from omni_vla_safety.interrupt import SigintFlag, quiet_half_built_executors, ros_main, spin_until_stopped

__all__ = ["SigintFlag", "quiet_half_built_executors", "ros_main", "spin_until_stopped"]
