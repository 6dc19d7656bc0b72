"""The lowering cache (policies/lowering_cache.py) serves a program only for the same graph, weights, delegate,
library versions and lowering code; otherwise it lowers afresh. A wrong hit would hand a test or a user another
model's program, so each input that must change the key is tried."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from omni_vla_policies import converters, lowering_cache
from omni_vla_policies.lowering_cache import ENV, lowered, program_key


def _linear(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval()


def _key(module: nn.Module, delegate: str = "xnnpack", code: tuple[Path, ...] = ()) -> str | None:
    return program_key(torch.export.export(module, (torch.ones(1, 4),), strict=False), delegate, code)


def test_the_key_changes_with_a_weight_the_graph_the_delegate_and_the_lowering_code(tmp_path: Path) -> None:
    base = _linear(0)
    nudged = _linear(0)
    with torch.no_grad():
        nudged[0].weight[1, 2] += 1e-7
    other_graph = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    other_graph.load_state_dict(base.state_dict())
    code = tmp_path / "lowering.py"
    code.write_text("a")
    keys = [_key(base, code=(code,)), _key(nudged, code=(code,)), _key(other_graph, code=(code,)),
            _key(base, "openvino", (code,))]
    code.write_text("b")
    keys.append(_key(base, code=(code,)))
    assert None not in keys and len(set(keys)) == len(keys)
    assert _key(_linear(0), code=(code,)) == keys[-1]


def test_the_key_is_the_same_in_another_process() -> None:
    script = ("import torch; from torch import nn; from omni_vla_policies.lowering_cache import program_key; "
              "torch.manual_seed(0); m = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval(); "
              "print(program_key(torch.export.export(m, (torch.ones(1, 4),), strict=False), 'xnnpack', ()))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == _key(_linear(0))


def test_a_tensor_that_cannot_be_hashed_turns_the_cache_off_for_that_program() -> None:
    class Opaque(torch.Tensor):
        pass

    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w

    ep = torch.export.export(Holder().eval(), (torch.ones(3),), strict=False)
    name = next(iter(ep.state_dict))
    ep.state_dict[name] = ep.state_dict[name].as_subclass(Opaque)
    assert program_key(ep, "xnnpack", ()) is None


def test_a_hit_returns_the_stored_program_without_lowering_and_a_miss_stores_it(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    calls: list[int] = []

    def lower() -> bytes:
        calls.append(1)
        return b"program"

    assert lowered("k" * 64, lower) == b"program" and calls == [1]
    assert lowered("k" * 64, lower) == b"program" and calls == [1]
    assert lowered(None, lower) == b"program" and calls == [1, 1]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["k" * 64 + ".pte"]


def test_without_the_variable_nothing_is_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert lowered("k" * 64, lambda: b"p") == b"p" and list(tmp_path.iterdir()) == []


def test_a_cached_executorch_program_computes_what_a_fresh_lowering_computes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Through export_pte and the ExecuTorch runtime: the second export is served from the cache, byte for byte,
    and a model with other weights is not."""
    from executorch.runtime import Runtime

    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    x = (torch.linspace(-1, 1, 4).reshape(1, 4),)
    converters.export_pte(_linear(0), x, tmp_path / "a.pte")
    converters.export_pte(_linear(0), x, tmp_path / "b.pte")
    converters.export_pte(_linear(1), x, tmp_path / "c.pte")
    assert (tmp_path / "a.pte").read_bytes() == (tmp_path / "b.pte").read_bytes()
    assert len(list((tmp_path / "cache").glob("*.pte"))) == 2
    rt = Runtime.get()
    for name, seed in (("b", 0), ("c", 1)):
        got = rt.load_program(str(tmp_path / f"{name}.pte")).load_method("forward").execute(list(x))[0]
        np.testing.assert_allclose(got.numpy(), _linear(seed)(*x).detach().numpy(), atol=1e-6)
    assert lowering_cache.cache_dir() == tmp_path / "cache"
