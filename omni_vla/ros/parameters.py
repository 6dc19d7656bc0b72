"""ROS parameter conventions of the project's nodes (omni_vla_safety.ros_params, shared with the supervisor)
and the one-line validation error a refusal carries (omni_vla_safety.errors)."""
from omni_vla_safety.errors import explain
from omni_vla_safety.ros_params import coerce, descriptor, model_fields, parameter_type, plain, unknown_overrides

__all__ = ["coerce", "descriptor", "explain", "model_fields", "parameter_type", "plain", "unknown_overrides"]
