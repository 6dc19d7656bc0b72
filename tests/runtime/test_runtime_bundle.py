"""Bad bundles and bad inputs are refused with a message naming the problem, before any inference."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from omni_vla.runtime.bundle import BundleError, load_bundle, read_manifest
from omni_vla.runtime.mnn import MNNRuntime
from omni_vla.runtime.text import InstructionError
from fixtures_policy import TASKS, cached_tiny_bundle


@pytest.fixture(scope="session")
def tiny_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cached_tiny_bundle(tmp_path_factory.getbasetemp())


@pytest.fixture()
def bundle_copy(tiny_bundle: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, dst)
    return dst


@pytest.fixture(scope="module")
def runtime(tiny_bundle: Path) -> MNNRuntime:
    return MNNRuntime(tiny_bundle)


def edit_manifest(bundle: Path, fn) -> None:  # noqa: ANN001
    p = bundle / "manifest.json"
    raw = json.loads(p.read_text())
    fn(raw)
    p.write_text(json.dumps(raw))


def inputs(rt: MNNRuntime) -> dict:
    s, h, d = rt.image_size, rt.horizon, rt.action_dim
    return dict(images={"front": np.zeros((1, 3, s, s), np.float32), "wrist": np.zeros((1, 3, s, s), np.float32)},
                state=np.zeros((1, d), np.float32), instruction=np.zeros((1, rt.embedding_dim), np.float32),
                prefix=np.zeros((1, h, d), np.float32), prefix_len=0, noise=np.zeros((1, h, d), np.float32),
                out=np.zeros((h, d), np.float32))


@pytest.mark.parametrize("backend", ["executorch", "mnn"])
def test_corrupt_artifact_is_refused_by_hash(bundle_copy: Path, backend: str) -> None:
    ext = {"executorch": "pte", "mnn": "mnn"}[backend]
    p = bundle_copy / f"flow_step.{ext}"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=rf"flow_step\.{ext} sha256 .* does not match"):
        load_bundle(bundle_copy, backend)


def test_truncated_artifact_is_refused_with_its_size(bundle_copy: Path) -> None:
    p = bundle_copy / "prefix.mnn"
    p.write_bytes(p.read_bytes()[:1000])
    with pytest.raises(BundleError, match=r"prefix\.mnn is 1000 bytes.*truncated"):
        MNNRuntime(bundle_copy)


def test_missing_artifact_is_named(bundle_copy: Path) -> None:
    (bundle_copy / "flow_finish.mnn").unlink()
    with pytest.raises(BundleError, match=r"flow_finish\.mnn is missing"):
        MNNRuntime(bundle_copy)


def test_manifest_of_another_format_version_is_refused(bundle_copy: Path) -> None:
    edit_manifest(bundle_copy, lambda m: m.update(format="omni_vla.bundle/0"))
    with pytest.raises(BundleError, match=r"format 'omni_vla.bundle/0', this runtime reads 'omni_vla.bundle/2'"):
        MNNRuntime(bundle_copy)


def test_bundle_from_another_library_version_is_refused(bundle_copy: Path) -> None:
    edit_manifest(bundle_copy, lambda m: m["versions"].update(mnn="2.0.0"))
    with pytest.raises(BundleError, match=r"exported with mnn 2\.0\.0, installed is 3\."):
        MNNRuntime(bundle_copy)


def test_manifest_shapes_that_disagree_are_refused(bundle_copy: Path) -> None:
    edit_manifest(bundle_copy, lambda m: m.update(horizon=12))
    with pytest.raises(BundleError, match=r"noise: shape \(1, 16, 8\), expected \(1, 12, 8\)"):
        read_manifest(bundle_copy)


def test_step_input_that_flow_init_does_not_make_is_refused(bundle_copy: Path) -> None:
    def rename(m: dict) -> None:
        m["stages"]["flow_step"]["inputs"][3]["name"] = "k_9"

    edit_manifest(bundle_copy, rename)
    with pytest.raises(BundleError, match=r"flow_step input k_9 .*: flow_init outputs None"):
        read_manifest(bundle_copy)


def test_step_index_for_another_step_count_is_refused(bundle_copy: Path) -> None:
    edit_manifest(bundle_copy, lambda m: m.update(num_steps=m["num_steps"] + 1))
    with pytest.raises(BundleError, match=r"stage flow_step input step: shape \(1, \d+\), expected"):
        read_manifest(bundle_copy)


def test_not_json_manifest_is_refused(bundle_copy: Path) -> None:
    (bundle_copy / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        MNNRuntime(bundle_copy)


@pytest.mark.parametrize("name,bad", [
    ("front", np.zeros((1, 3, 32, 32), np.float32)),
    ("front", np.zeros((1, 3, 64, 64), np.float64)),
    ("state", np.zeros((8,), np.float32)),
    ("noise", np.zeros((1, 16, 8), np.float16)),
    ("out", np.zeros((1, 16, 8), np.float32)),
])
def test_wrong_input_shape_or_dtype_names_the_input(runtime: MNNRuntime, name: str, bad: np.ndarray) -> None:
    x = inputs(runtime)
    (x["images"] if name in x["images"] else x)[name] = bad
    with pytest.raises(ValueError, match=rf"^{name}: expected float32\["):
        runtime.infer(**x)


@pytest.mark.parametrize("prefix_len", [-1, 99, 1.5])
def test_prefix_len_outside_the_trained_range_is_refused(runtime: MNNRuntime, prefix_len: object) -> None:
    x = inputs(runtime)
    x["prefix_len"] = prefix_len
    with pytest.raises(ValueError, match=r"prefix_len must be an int in 0\.\."):
        runtime.infer(**x)


def test_known_instruction_lookup_ignores_case_and_spacing(runtime: MNNRuntime) -> None:
    a = runtime.encode_instruction(TASKS["pick_red"])
    b = runtime.encode_instruction("  Pick up   the RED cube ")
    assert a.shape == (384,) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, runtime.encode_instruction(TASKS["touch_yellow"]))


def test_unknown_instruction_without_text_encoder_says_how_to_add_one(runtime: MNNRuntime) -> None:
    with pytest.raises(InstructionError, match=r"not in the bundle's embedding table.*--text-encoder"):
        runtime.encode_instruction("juggle the cubes")
