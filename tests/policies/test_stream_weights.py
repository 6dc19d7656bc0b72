"""Checkpoint weights streamed into a model tensor by tensor load exactly what the file holds, under the model's
names, and refuse a file that does not fit the architecture rather than leaving parameters at their random init."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from omni_vla_policies.vla.weights import prefix_rename, stream_weights

RENAME = prefix_rename((("model.vlm.", "vlm."), ("model.", "")), ("lm_head.",))


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.vlm = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)


def lerobot_file(tmp_path: Path, model: nn.Module, **extra: torch.Tensor) -> Path:
    """The model's weights under LeRobot-style names (bf16 where given), plus `extra` tensors."""
    names = {"vlm.weight": "model.vlm.weight", "vlm.bias": "model.vlm.bias",
             "head.weight": "model.head.weight", "head.bias": "model.head.bias"}
    tensors = {names[k]: v.clone() for k, v in model.state_dict().items()}
    tensors.update(extra)
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return path


def test_every_tensor_lands_under_the_models_name(tmp_path: Path) -> None:
    torch.manual_seed(0)
    source, target = Small(), Small()
    stream_weights(target, lerobot_file(tmp_path, source), RENAME, "test")
    for name, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[name], value), name


def test_heads_never_run_are_skipped(tmp_path: Path) -> None:
    source, target = Small(), Small()
    stream_weights(target, lerobot_file(tmp_path, source, **{"model.lm_head.weight": torch.ones(7, 3)}), RENAME, "t")
    assert torch.equal(target.head.weight, source.head.weight)


def test_bf16_weights_are_cast_to_the_models_dtype(tmp_path: Path) -> None:
    source, target = Small(), Small()
    path = tmp_path / "bf16.safetensors"
    save_file({"model." + k: v.to(torch.bfloat16) for k, v in source.state_dict().items()}, str(path))
    stream_weights(target, path, RENAME, "test")
    assert target.vlm.weight.dtype == torch.float32
    assert torch.allclose(target.vlm.weight, source.vlm.weight, atol=1e-2)


def test_a_tensor_the_model_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    path = lerobot_file(tmp_path, Small(), **{"model.extra.weight": torch.ones(2)})
    with pytest.raises(ValueError, match=r"unexpected \['model.extra.weight'\]"):
        stream_weights(Small(), path, RENAME, "test")


def test_a_parameter_the_file_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    source = Small()
    path = tmp_path / "short.safetensors"
    save_file({"model.vlm.weight": source.vlm.weight.detach().clone(), "model.vlm.bias": source.vlm.bias.detach()
               .clone(), "model.head.weight": source.head.weight.detach().clone()}, str(path))
    with pytest.raises(ValueError, match=r"missing \['head.bias'\]"):
        stream_weights(Small(), path, RENAME, "test")


def test_a_shape_that_differs_is_refused_and_nothing_is_half_copied_silently(tmp_path: Path) -> None:
    source = Small()
    path = tmp_path / "wide.safetensors"
    tensors = {"model.vlm.weight": torch.ones(5, 4), "model.vlm.bias": source.vlm.bias.detach().clone(),
               "model.head.weight": source.head.weight.detach().clone(), "model.head.bias": source.head.bias.detach()
               .clone()}
    save_file(tensors, str(path))
    with pytest.raises(ValueError, match=r"model.vlm.weight \(5, 4\) vs \(3, 4\)"):
        stream_weights(Small(), path, RENAME, "test")
