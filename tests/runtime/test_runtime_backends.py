"""ExecuTorch and MNN runtimes on a real exported bundle: match eager PyTorch, pin the prefix, no torch in MNN."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omni_vla.backends import LOOP_BACKENDS
from omni_vla.inference import client
from omni_vla.runtime import registry
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.executorch import ExecuTorchRuntime
from omni_vla.runtime.mnn import MNNRuntime
from omni_vla_policies.parity import snr_db
from fixtures_policy import TASKS, cached_tiny_bundle
from omni_vla_policies.torch_runtime import TorchRuntime


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cached_tiny_bundle(tmp_path_factory.getbasetemp())


def observation(rt, seed: int) -> dict:  # noqa: ANN001
    rng = np.random.default_rng(seed)
    s, h, d = rt.image_size, rt.horizon, rt.action_dim
    state = (np.array(rt.manifest.normalization.state_mean) + 0.2 * rng.standard_normal(d)).astype(np.float32)[None]
    return dict(images={"front": rng.random((1, 3, s, s), dtype=np.float32),
                        "wrist": rng.random((1, 3, s, s), dtype=np.float32)},
                state=state, instruction=rt.encode_instruction(list(TASKS.values())[seed % 4])[None],
                prefix=(state[:, None] + 0.05 * rng.standard_normal((1, h, d))).astype(np.float32),
                prefix_len=seed % (rt.max_prefix + 1), noise=rng.standard_normal((1, h, d), dtype=np.float32))


@pytest.mark.parametrize("backend", [ExecuTorchRuntime, MNNRuntime])
def test_backend_matches_eager_torch_above_40_db_and_pins_the_prefix(tiny_bundle: Path, backend: type) -> None:
    ref, rt = TorchRuntime(tiny_bundle), backend(tiny_bundle, num_threads=1)
    outs, refs = [], []
    for seed in range(5):
        o = observation(rt, seed)
        out, want = np.full((16, 8), np.nan, np.float32), np.zeros((16, 8), np.float32)
        rt.infer(out=out, **o)
        ref.infer(out=want, **o)
        d = o["prefix_len"]
        np.testing.assert_allclose(out[:d], o["prefix"][0, :d], atol=1e-6)
        outs.append(out - o["state"])
        refs.append(want - o["state"])
    assert snr_db(np.stack(refs), np.stack(outs)) >= 40
    rt.close()


@pytest.mark.parametrize("backend", [ExecuTorchRuntime, MNNRuntime])
def test_infer_writes_the_callers_buffer_and_is_repeatable(tiny_bundle: Path, backend: type) -> None:
    rt = backend(tiny_bundle, num_threads=2)
    o = observation(rt, 3)
    out = np.zeros((16, 8), np.float32)
    rt.infer(out=out, **o)
    first = out.copy()
    o2 = observation(rt, 7)
    rt.infer(out=out, **o2)  # a different observation changes the result ...
    assert not np.allclose(out, first)
    rt.infer(out=out, **o)  # ... and the same one gives it back bit for bit (no stale state)
    np.testing.assert_array_equal(out, first)
    assert rt.num_threads == 2
    rt.close()


def test_a_staged_vla_bundle_runs_on_mnn_without_torch_or_lerobot(tiny_vla) -> None:
    """The staged runtime an imported SmolVLA/pi0 runs on (kind "vla"), opened as vla_node's worker opens it: one
    chunk from the bundle's own language table and cameras, and neither torch nor LeRobot in the process."""
    code = f"""
import json, sys
import numpy as np
from omni_vla.inference.client import open_runtime
rt = open_runtime("mnn", {str(tiny_vla[1])!r}, 1)
z = lambda *s: np.zeros(s, np.float32)
images = {{c.name: z(1, 3, c.height, c.width) + 0.5 for c in rt.cameras}}
out = z(rt.horizon, rt.action_dim)
text = rt.encode_instruction("pick up the red cube")[None]
rt.infer(images, z(1, rt.action_dim), text, z(1, rt.horizon, rt.action_dim), 0, z(1, rt.horizon, rt.action_dim), out)
mods = [m for m in sys.modules if m.split(".")[0] in ("torch", "lerobot", "transformers")]
print(json.dumps({{"imported": mods, "finite": bool(np.isfinite(out).all()), "moved": bool(np.abs(out).max() > 0)}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"imported": [], "finite": True, "moved": True}


def test_noise_changes_the_unpinned_actions_only(tiny_bundle: Path) -> None:
    rt = MNNRuntime(tiny_bundle)
    o = observation(rt, 4)
    o["prefix_len"] = 4
    a, b = np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float32)
    rt.infer(out=a, **o)
    o["noise"] = o["noise"] * -1.0
    rt.infer(out=b, **o)
    np.testing.assert_array_equal(a[:4], b[:4])
    assert np.abs(a[4:] - b[4:]).max() > 1e-4


def test_mnn_runtime_runs_without_importing_torch(tiny_bundle: Path) -> None:
    code = f"""
import json, sys
import numpy as np
from omni_vla.runtime.mnn import MNNRuntime
rt = MNNRuntime({str(tiny_bundle)!r})
e = rt.encode_instruction({TASKS['pick_red']!r})[None]
z = lambda *s: np.zeros(s, np.float32)
out = z(16, 8)
rt.infer({{"front": z(1, 3, 64, 64), "wrist": z(1, 3, 64, 64)}}, z(1, 8), e, z(1, 16, 8), 0, z(1, 16, 8), out)
print(json.dumps({{"torch": "torch" in sys.modules, "finite": bool(np.isfinite(out).all())}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"torch": False, "finite": True}


def test_a_staged_bundle_runs_on_the_robot_backends_it_holds_and_refuses_eager_torch_in_one_line(
        tiny_vla, tmp_path: Path) -> None:
    _, bundle = tiny_vla
    assert registry.runnable_backends(bundle) == ("executorch", "mnn")
    reference = Path(__file__).resolve().parents[2] / "bundles" / "reference"
    assert registry.runnable_backends(reference) == LOOP_BACKENDS  # eager PyTorch reruns its policy.pt
    mnn_only = tmp_path / "mnn_only"
    shutil.copytree(bundle, mnn_only)
    raw = json.loads((mnn_only / "manifest.json").read_text())
    raw["stages"]["finish"]["artifacts"].pop("executorch")
    (mnn_only / "manifest.json").write_text(json.dumps(raw))
    assert registry.runnable_backends(mnn_only) == ("mnn",)
    with pytest.raises(BundleError) as exc:
        client.open_runtime("torch", str(bundle), 1)
    assert str(exc.value) == (f"{bundle}: a vla bundle runs on executorch or mnn; backend 'torch' reruns only the "
                              "reference policy's checkpoint")
