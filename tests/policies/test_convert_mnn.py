"""ONNX -> MNN conversion keeps out of the caller's working directory: MNN's converter spills the weights to a
fixed file name there and reads them back, so a shared directory once swapped two conversions' weights."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from omni_vla_policies.converters import convert_mnn, export_onnx

SCRATCH = ".__convert_external_data.bin"


def _mnn_run(path: Path, x: np.ndarray) -> np.ndarray:
    import MNN

    net = MNN.nn.load_module_from_file(str(path), ["x"], ["y"])
    return np.array(net.forward([MNN.expr.const(x, x.shape)])[0].read(), np.float32)


@pytest.fixture
def model_onnx(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 5)).eval()
    path = tmp_path / "m.onnx"
    export_onnx(m, (torch.zeros(1, 64),), ["x"], ["y"], path)
    return m, path


def test_a_file_named_like_the_converter_scratch_in_the_callers_directory_survives(
        model_onnx: tuple[torch.nn.Module, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m, onnx_path = model_onnx
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / SCRATCH).write_bytes(b"\x7f" * 4096)  # what another conversion in this directory would have written
    monkeypatch.chdir(cwd)
    convert_mnn(onnx_path, Path("m.mnn"))  # a relative output path still lands in the caller's directory
    assert (cwd / SCRATCH).read_bytes() == b"\x7f" * 4096
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    want = m(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(_mnn_run(cwd / "m.mnn", x).reshape(want.shape), want, rtol=1e-4, atol=1e-5)


def test_a_failed_conversion_is_one_error_naming_the_model(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model")
    with pytest.raises(RuntimeError, match="MNN conversion of .*bad.onnx failed"):
        convert_mnn(bad, tmp_path / "bad.mnn")
