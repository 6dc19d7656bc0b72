"""The stage programs of any staged VLA model this project re-implements (SmolVLA, pi0 / pi0.5): one place that
picks the model's own stage modules and example inputs, so export, parity and bundling stay model-neutral."""
from __future__ import annotations

from torch import Tensor, nn

from omni_vla_policies.vla import model as smolvla
from omni_vla_policies.vla import pi0_model as pi0


def stage_modules(model: nn.Module) -> dict[str, nn.Module]:
    return pi0.stage_modules(model) if isinstance(model, pi0.Pi0) else smolvla.stage_modules(model)


def stage_inputs(model: nn.Module) -> dict[str, tuple[Tensor, ...]]:
    """Example inputs (static shapes) the exporters trace."""
    return pi0.stage_inputs(model.arch) if isinstance(model, pi0.Pi0) else smolvla.stage_inputs(model.arch)
