"""A pydantic ValidationError as the one line every refusal carries: the CLI, sim and policies use the supervisor's
formatter (omni_vla_safety.errors), so a refusal reads the same from every node and verb."""
from omni_vla_safety.errors import explain, one_line

__all__ = ["explain", "one_line"]
