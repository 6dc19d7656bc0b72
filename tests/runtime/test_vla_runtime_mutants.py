"""StagedVLARuntime edges cosmic-ray found unpinned (results/mutation_core.md).

The toy `step` of test_vla_runtime.py acts on each row alone, so what the inpainting writes into the pinned rows
before a step never reached the other rows (and the pinned rows are overwritten at the end): the chunk did not
depend on it. A real expert attends across the chunk; `mixing_step` adds the mean of the whole x (every row and
padded column) to each element, so the free rows depend on what the pinned rows and the padded columns held at
each step. test_vla_runtime's loader and oracle both look `step` up at call time, so both chain the mixing step."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

import test_vla_runtime as toy
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.chunk_manifest import ChunkStageSpec
from omni_vla.runtime.vla import StagedVLARuntime, is_vla_bundle

PLAIN_STEP = toy.step


def mixing_step(x: np.ndarray, t: np.ndarray, keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The toy step plus 0.05 x the mean of all of x: each element sees every row and padded column."""
    return PLAIN_STEP(x, t, keys, values, mask) + 0.05 * x.mean()


@pytest.fixture()
def mixing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StagedVLARuntime:
    monkeypatch.setattr(toy, "step", mixing_step)
    return StagedVLARuntime(toy.make_bundle(tmp_path), "mnn", toy.toy_loader, check_versions=False)


@pytest.mark.parametrize("p", [0, 1, 2, toy.P_MAX])
def test_through_a_step_attending_across_the_chunk_the_free_rows_follow_the_inpainted_ones(
        mixing: StagedVLARuntime, p: int) -> None:
    images, state, noise, rows = toy.inputs(10 + p)
    out = toy.run(mixing, images, state, "go", noise, rows, p)
    np.testing.assert_allclose(out, toy.oracle(images, state, "go", noise, rows, p), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:p], rows[0, :p], rtol=1e-6, atol=1e-6)


class Recording:
    """test_vla_runtime's toy loader, noting the threads each stage was loaded with and counting its runs."""

    def __init__(self) -> None:
        self.threads: dict[str, int] = {}
        self.runs: dict[str, int] = {}
        self.dtypes: dict[str, list[str]] = {}

    def __call__(self, path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray], threads: int):  # noqa: ANN204
        self.threads[path.stem], self.runs[path.stem] = threads, 0
        self.dtypes[path.stem] = [str(a.dtype) for a in inputs]
        run = toy.toy_loader(path, stage, inputs, threads)

        def counted():  # noqa: ANN202
            self.runs[path.stem] += 1
            return run()
        return counted


def test_by_default_every_stage_runs_on_one_thread_and_is_warmed_up_once(tmp_path: Path) -> None:
    loader = Recording()
    StagedVLARuntime(toy.make_bundle(tmp_path), "mnn", loader, check_versions=False)
    assert loader.threads == {"vision": 1, "prefix": 1, "step": 1, "finish": 1}
    assert loader.runs == {"vision": len(toy.CAMS), "prefix": 1, "step": toy.N, "finish": 1}


def test_without_warm_up_no_stage_runs_until_the_first_inference(tmp_path: Path) -> None:
    loader = Recording()
    StagedVLARuntime(toy.make_bundle(tmp_path), "mnn", loader, check_versions=False, warmup=False)
    assert loader.runs == {"vision": 0, "prefix": 0, "step": 0, "finish": 0}


def test_more_than_one_thread_is_accepted_and_handed_to_every_stage(tmp_path: Path) -> None:
    loader = Recording()
    rt = StagedVLARuntime(toy.make_bundle(tmp_path), "mnn", loader, num_threads=2, check_versions=False)
    assert rt.num_threads == 2 and loader.threads == {"vision": 2, "prefix": 2, "step": 2, "finish": 2}


@pytest.mark.parametrize("format_, kind", [("omni_vla.bundle/2", "vla"), ("omni_vla.bundle/4", "vla"),
                                           ("omni_vla.bundle/3", "world"), ("omni_vla.bundle/3", "chunk")])
def test_a_manifest_of_another_format_or_kind_is_not_a_vla_bundle(tmp_path: Path, format_: str, kind: str) -> None:
    bundle = toy.make_bundle(tmp_path)
    raw = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**raw, "format": format_, "kind": kind}))
    assert not is_vla_bundle(bundle)


def test_by_default_a_bundle_exported_with_another_backend_version_is_refused(tmp_path: Path) -> None:
    bundle = toy.make_bundle(tmp_path)
    raw = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**raw, "versions": {"mnn": "0.0.0-other"}}))
    with pytest.raises(BundleError, match="bundle was exported with mnn 0.0.0-other"):
        StagedVLARuntime(bundle, "mnn", toy.toy_loader)


def test_each_stage_is_given_input_buffers_of_the_manifests_dtypes(tmp_path: Path) -> None:
    loader = Recording()
    StagedVLARuntime(toy.make_bundle(tmp_path), "mnn", loader, check_versions=False)
    assert loader.dtypes == {"vision": ["float32"], "prefix": ["float32", "int32", "float32", "float32"],
                             "step": ["float32"] * 5, "finish": ["float32"]}


def test_an_instruction_of_exactly_max_tokens_ids_is_masked_in_full(tmp_path: Path) -> None:
    bundle = toy.make_bundle(tmp_path)
    raw = json.loads((bundle / "manifest.json").read_text())
    raw["language"]["table"]["all four"] = [9, 8, 7, 6]
    (bundle / "manifest.json").write_text(json.dumps(raw))
    rt = StagedVLARuntime(bundle, "mnn", toy.toy_loader, check_versions=False)
    np.testing.assert_array_equal(rt.encode_instruction("all four"), [9, 8, 7, 6, 1, 1, 1, 1])
