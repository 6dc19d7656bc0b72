"""StagedVLARuntime's own arithmetic, with toy numpy stages in place of the exported programs: what it feeds each
stage (normalised, zero-padded state; padded language ids and mask; every camera's tokens in order; the prefix's
KV cache into every step), the Euler times, the inpainting of pinned rows and the un-normalisation of the chunk.
The oracle below chains the same toy stages in plain Python loops, written from the manifest's prose
(docs/bundle_format.md), not from the runtime. The exported programs are checked against the eager model in
tests/policies/test_vla_bundle.py.

The toy `step` acts on each row alone, so what the inpainting writes into the pinned rows before a step would
never reach the other rows (and the pinned rows are overwritten at the end): the chunk would not depend on it.
A real expert attends across the chunk; `mixing_step` adds the mean of the whole x (every row and padded column)
to each element, so the free rows depend on what the pinned rows and the padded columns held at each step. The
toy loader and the oracle both look `step` up at call time, so both chain the mixing step.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from omni_vla.runtime.bundle import BundleError, artifact_spec, write_json_atomic
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT, ChunkStageSpec
from omni_vla.runtime.vla import StagedVLARuntime, is_vla_bundle
from omni_vla.runtime.vla_manifest import VLA_KIND, VLAManifest

CAMS, HW, T, W = ("front", "wrist"), 8, 2, 3
L, S_PAD, A_PAD, D, H, N, P_MAX = 4, 10, 10, 8, 6, 3, 4
KV = (2, 5, 1, 2)
MEAN = np.linspace(-1, 1, D).astype(np.float32)
STD = np.linspace(0.5, 2.0, D).astype(np.float32)
TABLE = {"go": [5, 7], "stop there": [1, 2, 3]}


def tensors(named: Sequence[tuple[str, tuple[int, ...]]]) -> list[dict]:
    return [{"name": n, "shape": s, "dtype": "int32" if n == "lang_tokens" else "float32"} for n, s in named]


def make_bundle(root: Path) -> Path:
    x = (1, H, A_PAD)
    io = {
        "vision": ([("image", (1, 3, HW, HW))], [("image_tokens", (1, T, W))]),
        "prefix": ([("image_tokens", (2, T, W)), ("lang_tokens", (1, L)), ("lang_mask", (1, L)), ("state", (1, S_PAD))],
                   [("keys", KV), ("values", KV)]),
        "step": ([("x_t", x), ("time", (1,)), ("keys", KV), ("values", KV), ("lang_mask", (1, L))], [("x_next", x)]),
        "finish": ([("x", x)], [("actions", (1, H, D))]),
    }
    stages = {}
    for stage, (ins, outs) in io.items():
        (root / f"{stage}.mnn").write_bytes(stage.encode())
        stages[stage] = {"inputs": tensors(ins), "outputs": tensors(outs),
                         "artifacts": {"mnn": artifact_spec(root, f"{stage}.mnn").model_dump()}}
    joints = [f"j{i}" for i in range(D)]
    m = VLAManifest.model_validate({
        "format": CHUNK_FORMAT, "kind": VLA_KIND, "policy": "toy", "source": {}, "control_rate_hz": 5.0,
        "cameras": [{"name": c, "height": HW, "width": HW} for c in CAMS],
        "state": {"joint_names": joints, "units": ["rad"] * D},
        "action": {"joint_names": joints, "units": ["rad"] * D, "space": "absolute", "chunk_length": H,
                   "execute_steps": 3},
        "normalization": {k: {"subtract": MEAN.tolist(), "divide": STD.tolist()} for k in ("state", "action")},
        "language": {"tokenizer": "toy", "max_tokens": L, "table": TABLE},
        "flow": {"num_steps": N, "padded_state_dim": S_PAD, "padded_action_dim": A_PAD, "max_prefix": P_MAX},
        "stages": stages, "versions": {},
    })
    write_json_atomic(root / "manifest.json", m.model_dump(mode="json"))
    return root


# ----- toy stages: each output depends on every input element it receives ---------------------------------------
def vision(image: np.ndarray) -> np.ndarray:
    w = np.arange(1, image.size + 1, dtype=np.float64).reshape(image.shape) / image.size
    return np.full((1, T, W), float((image * w).sum())) + np.arange(T * W).reshape(1, T, W) * 0.01


def prefix(tokens: np.ndarray, ids: np.ndarray, mask: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    wt = np.arange(1, tokens.size + 1).reshape(tokens.shape) * 1e-3
    ws = np.arange(1, S_PAD + 1) * 0.1
    base = float((tokens * wt).sum() + (ids * np.arange(1, L + 1)).sum() * 1e-2 + (mask * np.arange(1, L + 1)).sum()
                 + (state[0] * ws).sum())
    keys = base + np.arange(np.prod(KV)).reshape(KV) * 1e-3
    return keys, -0.25 * keys + 1.0


def step(x: np.ndarray, t: np.ndarray, keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    target = 0.01 * keys.mean() + 0.02 * values.mean() + 0.1 * mask.sum()
    grid = np.arange(H * A_PAD).reshape(1, H, A_PAD) * 1e-2
    return x + (-1.0 / N) * (x - target - grid - float(t[0]))


def toy_loader(path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray], threads: int):  # noqa: ANN201
    name = path.stem
    fns = {"vision": lambda: [vision(inputs[0]).astype(np.float32)],
           "prefix": lambda: [a.astype(np.float32) for a in prefix(*inputs)],
           "step": lambda: [step(*inputs).astype(np.float32)],
           "finish": lambda: [inputs[0][:, :, :D].copy()]}
    return fns[name]


# ----- the oracle ---------------------------------------------------------------------------------------------
def oracle(images: dict, state: np.ndarray, text: str, noise: np.ndarray, prefix_rows: np.ndarray | None = None,
           p: int = 0) -> np.ndarray:
    tokens = np.concatenate([vision(images[c]) for c in CAMS], axis=0)
    ids, mask = np.zeros((1, L), np.int64), np.zeros((1, L))
    for i, tok in enumerate(TABLE[text]):
        ids[0, i], mask[0, i] = tok, 1.0
    padded = np.zeros((1, S_PAD))
    for j in range(D):
        padded[0, j] = (state[0, j] - MEAN[j]) / STD[j]
    keys, values = prefix(tokens, ids, mask, padded)
    x0 = np.zeros((1, H, A_PAD))
    x0[0, :, :D] = noise[0]
    pinned = np.zeros((H, D))
    for r in range(p):
        for j in range(D):
            pinned[r, j] = (prefix_rows[0, r, j] - MEAN[j]) / STD[j]
    x = x0.copy()
    for i in range(N):
        t = 1.0 - i / N
        for r in range(p):
            x[0, r, :D] = t * x0[0, r, :D] + (1.0 - t) * pinned[r]
        x = step(x, np.array([t]), keys, values, mask)
    for r in range(p):
        x[0, r, :D] = pinned[r]
    return x[0, :, :D] * STD + MEAN


@pytest.fixture()
def runtime(tmp_path: Path) -> StagedVLARuntime:
    return StagedVLARuntime(make_bundle(tmp_path), "mnn", toy_loader, check_versions=False)


def inputs(seed: int) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = {c: rng.random((1, 3, HW, HW)).astype(np.float32) for c in CAMS}
    state = (MEAN + STD * rng.standard_normal(D)).astype(np.float32)[None]
    noise = rng.standard_normal((1, H, D)).astype(np.float32)
    rows = (MEAN + STD * rng.standard_normal((H, D))).astype(np.float32)[None]
    return images, state, noise, rows


def run(rt: StagedVLARuntime, images: dict, state: np.ndarray, text: str, noise: np.ndarray, rows: np.ndarray,
        p: int) -> np.ndarray:
    out = np.zeros((H, D), np.float32)
    rt.infer(images, state, rt.encode_instruction(text)[None], rows, p, noise, out)
    return out


@pytest.mark.parametrize("text", sorted(TABLE))
def test_a_free_chunk_is_the_oracles_chain_of_the_stages(runtime: StagedVLARuntime, text: str) -> None:
    images, state, noise, rows = inputs(0)
    np.testing.assert_allclose(run(runtime, images, state, text, noise, rows, 0), oracle(images, state, text, noise),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2, P_MAX])
def test_pinned_rows_are_inpainted_each_step_and_returned_exactly(runtime: StagedVLARuntime, p: int) -> None:
    images, state, noise, rows = inputs(p)
    out = run(runtime, images, state, "go", noise, rows, p)
    np.testing.assert_allclose(out, oracle(images, state, "go", noise, rows, p), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:p], rows[0, :p], rtol=1e-6, atol=1e-6)


def test_each_input_reaches_the_chunk(runtime: StagedVLARuntime) -> None:
    images, state, noise, rows = inputs(7)
    base = run(runtime, images, state, "go", noise, rows, 0)
    swapped = {"front": images["wrist"], "wrist": images["front"]}
    changes = {"camera order": run(runtime, swapped, state, "go", noise, rows, 0),
               "state": run(runtime, images, state + 0.1, "go", noise, rows, 0),
               "instruction": run(runtime, images, state, "stop there", noise, rows, 0),
               "noise": run(runtime, images, state, "go", noise + 0.1, rows, 0)}
    for what, out in changes.items():
        assert np.abs(out - base).max() > 1e-4, what
    np.testing.assert_array_equal(run(runtime, images, state, "go", noise, rows + 5.0, 0), base)  # p = 0: not read


def test_the_instruction_is_its_ids_then_its_mask_and_unknown_text_is_refused(runtime: StagedVLARuntime) -> None:
    np.testing.assert_array_equal(runtime.encode_instruction("stop there"), [1, 2, 3, 0, 1, 1, 1, 0])
    assert runtime.embedding_dim == 2 * L
    with pytest.raises(KeyError, match=r"'dance' is not in the bundle's language table; expected one of \['go'"):
        runtime.encode_instruction("dance")


def test_the_runtime_states_the_loops_shapes_from_the_manifest(runtime: StagedVLARuntime) -> None:
    assert (runtime.horizon, runtime.action_dim, runtime.max_prefix, runtime.control_rate_hz, runtime.execute_steps) \
        == (H, D, P_MAX, 5.0, 3)
    assert [(c.name, c.height, c.width) for c in runtime.cameras] == [(c, HW, HW) for c in CAMS]
    assert runtime.joint_names == [f"j{i}" for i in range(D)] and runtime.num_steps == N


@pytest.mark.parametrize("change, why", [
    (lambda a: a.update(prefix_len=P_MAX + 1), rf"prefix_len must be an int in 0\.\.{P_MAX}"),
    (lambda a: a.update(prefix_len=-1), "prefix_len must be an int"),
    (lambda a: a.update(prefix_len=1.0), "prefix_len must be an int"),
    (lambda a: a["images"].pop("wrist"), "wrist"),
    (lambda a: a.update(state=np.zeros((1, D + 1), np.float32)), "state"),
    (lambda a: a.update(noise=np.zeros((1, H, D), np.float64)), "noise"),
    (lambda a: a.update(out=np.zeros((H + 1, D), np.float32)), "out"),
    (lambda a: a.update(instruction=np.zeros((1, L), np.float32)), "instruction"),
    (lambda a: a.update(prefix=np.zeros((1, H - 1, D), np.float32)), "prefix"),
])
def test_a_wrong_input_is_refused_naming_it(runtime: StagedVLARuntime, change, why: str) -> None:  # noqa: ANN001
    images, state, noise, rows = inputs(0)
    args = {"images": dict(images), "state": state, "instruction": runtime.encode_instruction("go")[None],
            "prefix": rows, "prefix_len": 0, "noise": noise, "out": np.zeros((H, D), np.float32)}
    change(args)
    with pytest.raises((ValueError, TypeError), match=why):
        runtime.infer(**args)


def test_a_backend_the_bundle_has_no_artifact_for_is_refused_naming_what_it_has(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"stage vision has no executorch artifact; it has \['mnn'\]"):
        StagedVLARuntime(make_bundle(tmp_path), "executorch", toy_loader, check_versions=False)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        StagedVLARuntime(tmp_path, "mnn", toy_loader, num_threads=0, check_versions=False)


def test_only_a_format_3_vla_manifest_is_recognised(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    assert is_vla_bundle(make_bundle(tmp_path / "b"))
    assert not is_vla_bundle(tmp_path / "none")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "manifest.json").write_text('{"format": "omni_vla.bundle/3", "kind": "chunk"}')
    assert not is_vla_bundle(tmp_path / "c")
    (tmp_path / "c" / "manifest.json").write_text("not json")
    assert not is_vla_bundle(tmp_path / "c")


PLAIN_STEP = step


def mixing_step(x: np.ndarray, t: np.ndarray, keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The toy step plus 0.05 x the mean of all of x: each element sees every row and padded column."""
    return PLAIN_STEP(x, t, keys, values, mask) + 0.05 * x.mean()


@pytest.fixture()
def mixing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StagedVLARuntime:
    monkeypatch.setitem(globals(), "step", mixing_step)
    return StagedVLARuntime(make_bundle(tmp_path), "mnn", toy_loader, check_versions=False)


@pytest.mark.parametrize("p", [0, 1, 2, P_MAX])
def test_through_a_step_attending_across_the_chunk_the_free_rows_follow_the_inpainted_ones(
        mixing: StagedVLARuntime, p: int) -> None:
    images, state, noise, rows = inputs(10 + p)
    out = run(mixing, images, state, "go", noise, rows, p)
    np.testing.assert_allclose(out, oracle(images, state, "go", noise, rows, p), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[:p], rows[0, :p], rtol=1e-6, atol=1e-6)


class Recording:
    """The toy loader, noting the threads each stage was loaded with and counting its runs."""

    def __init__(self) -> None:
        self.threads: dict[str, int] = {}
        self.runs: dict[str, int] = {}
        self.dtypes: dict[str, list[str]] = {}

    def __call__(self, path: Path, stage: ChunkStageSpec, inputs: Sequence[np.ndarray], threads: int):  # noqa: ANN204
        self.threads[path.stem], self.runs[path.stem] = threads, 0
        self.dtypes[path.stem] = [str(a.dtype) for a in inputs]
        run = toy_loader(path, stage, inputs, threads)

        def counted():  # noqa: ANN202
            self.runs[path.stem] += 1
            return run()
        return counted


def test_by_default_every_stage_runs_on_one_thread_and_is_warmed_up_once(tmp_path: Path) -> None:
    loader = Recording()
    StagedVLARuntime(make_bundle(tmp_path), "mnn", loader, check_versions=False)
    assert loader.threads == {"vision": 1, "prefix": 1, "step": 1, "finish": 1}
    assert loader.runs == {"vision": len(CAMS), "prefix": 1, "step": N, "finish": 1}


def test_without_warm_up_no_stage_runs_until_the_first_inference(tmp_path: Path) -> None:
    loader = Recording()
    StagedVLARuntime(make_bundle(tmp_path), "mnn", loader, check_versions=False, warmup=False)
    assert loader.runs == {"vision": 0, "prefix": 0, "step": 0, "finish": 0}


def test_more_than_one_thread_is_accepted_and_handed_to_every_stage(tmp_path: Path) -> None:
    loader = Recording()
    rt = StagedVLARuntime(make_bundle(tmp_path), "mnn", loader, num_threads=2, check_versions=False)
    assert rt.num_threads == 2 and loader.threads == {"vision": 2, "prefix": 2, "step": 2, "finish": 2}


@pytest.mark.parametrize("format_, kind", [("omni_vla.bundle/2", "vla"), ("omni_vla.bundle/4", "vla"),
                                           ("omni_vla.bundle/3", "world"), ("omni_vla.bundle/3", "chunk")])
def test_a_manifest_of_another_format_or_kind_is_not_a_vla_bundle(tmp_path: Path, format_: str, kind: str) -> None:
    bundle = make_bundle(tmp_path)
    raw = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**raw, "format": format_, "kind": kind}))
    assert not is_vla_bundle(bundle)


def test_by_default_a_bundle_exported_with_another_backend_version_is_refused(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path)
    raw = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**raw, "versions": {"mnn": "0.0.0-other"}}))
    with pytest.raises(BundleError, match="bundle was exported with mnn 0.0.0-other"):
        StagedVLARuntime(bundle, "mnn", toy_loader)


def test_each_stage_is_given_input_buffers_of_the_manifests_dtypes(tmp_path: Path) -> None:
    loader = Recording()
    StagedVLARuntime(make_bundle(tmp_path), "mnn", loader, check_versions=False)
    assert loader.dtypes == {"vision": ["float32"], "prefix": ["float32", "int32", "float32", "float32"],
                             "step": ["float32"] * 5, "finish": ["float32"]}


def test_an_instruction_of_exactly_max_tokens_ids_is_masked_in_full(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path)
    raw = json.loads((bundle / "manifest.json").read_text())
    raw["language"]["table"]["all four"] = [9, 8, 7, 6]
    (bundle / "manifest.json").write_text(json.dumps(raw))
    rt = StagedVLARuntime(bundle, "mnn", toy_loader, check_versions=False)
    np.testing.assert_array_equal(rt.encode_instruction("all four"), [9, 8, 7, 6, 1, 1, 1, 1])
