"""A kind-"vla" bundle of SmolVLA's architecture at test size with the Panda's 8 joints (seeded random weights),
exported for the robot backends: what the tests of the staged runtime, the loop and the node run."""
from __future__ import annotations

from pathlib import Path

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla_policies.vla.bundle_vla import write_vla_bundle
from omni_vla_policies.vla.export_vla import build, export_stages
from omni_vla_policies.vla.model import SmolVLA
from omni_vla_policies.vla.smolvla_config import tiny

ARCH = tiny().model_copy(update={"state_dim": 8, "action_dim": 8})


def tiny_vla(seed: int = 3) -> SmolVLA:
    return build(ARCH, seed=seed)


def tiny_vla_bundle(model: SmolVLA, root: Path, rate_hz: float = 10.0, execute_steps: int = 3,
                    max_prefix: int = 6) -> Path:
    """Export every stage (ONNX is MNN's route) and write root/bundle; returns the bundle directory."""
    export_stages(model, root / "art", backends=("onnx", *ROBOT_BACKENDS), log=lambda _s: None)
    write_vla_bundle(root / "art", root / "bundle", rate_hz=rate_hz, execute_steps=execute_steps,
                     max_prefix=max_prefix, backends=ROBOT_BACKENDS)
    return root / "bundle"
