"""export_pte leaves out the buffers a program never reads, and still exports a module whose forward names one
without computing with it (ACT's ONNX form passes its LayerNorm row to the native norm, which ignores it: the
OpenVINO export of that form failed with "'ActExportForm' object has no attribute 'avg'")."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from omni_vla_policies.converters import _without_unused_buffers, export_pte

BIG = 1 << 18  # float32 elements: 1 MB, far above the rest of the program


class _NamesUnusedBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("row", torch.full((1, 4), 0.25))

    def forward(self, x: Tensor) -> Tensor:
        return self._norm(x, self.row)

    @staticmethod
    def _norm(x: Tensor, row: Tensor) -> Tensor:  # `row` named, never used: the native form's signature
        return torch.nn.functional.layer_norm(x, (4,)) * 2.0


class _NeverNamesBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("big", torch.ones(BIG))

    def forward(self, x: Tensor) -> Tensor:
        return x * 2.0


class _UsesBuffer(_NeverNamesBuffer):
    def forward(self, x: Tensor) -> Tensor:
        return x * self.big[:4]


def _run(path: Path, x: Tensor) -> np.ndarray:
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(path)).load_method("forward")
    return method.execute([x])[0].numpy()


def test_module_naming_a_buffer_it_never_reads_exports_and_computes_its_function(tmp_path: Path) -> None:
    x = torch.randn(3, 4)
    path = tmp_path / "named.pte"
    export_pte(_NamesUnusedBuffer().eval(), (x,), path)
    np.testing.assert_allclose(_run(path, x), torch.nn.functional.layer_norm(x, (4,)).numpy() * 2.0, atol=1e-5)


def test_buffer_the_graph_never_reads_is_not_stored_and_one_it_reads_is(tmp_path: Path) -> None:
    x = torch.randn(3, 4)
    unused, used = tmp_path / "unused.pte", tmp_path / "used.pte"
    export_pte(_NeverNamesBuffer().eval(), (x,), unused)
    export_pte(_UsesBuffer().eval(), (x,), used)
    assert unused.stat().st_size < BIG * 4 // 2 < used.stat().st_size
    np.testing.assert_allclose(_run(unused, x), x.numpy() * 2.0, atol=0)
    np.testing.assert_allclose(_run(used, x), x.numpy(), atol=0)


class _Stage(nn.Module):
    """A stage reaching a large model of which it reads one weight and none of its buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.model = _NeverNamesBuffer()
        self.model.weight = nn.Parameter(torch.full((4,), 3.0))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.model.weight


def test_leaving_buffers_out_shares_the_weights_and_keeps_the_original_whole() -> None:
    stage = _Stage().eval()
    pruned = _without_unused_buffers(stage, (torch.randn(3, 4),))
    assert not hasattr(pruned.model, "big") and stage.model.big.numel() == BIG
    assert pruned.model.weight.data_ptr() == stage.model.weight.data_ptr()
