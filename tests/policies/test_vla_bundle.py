"""A SmolVLA exported stage by stage runs as a kind-"vla" bundle behind the loop's runtime interface, on ExecuTorch
and MNN: the chained programs compute what the eager model computes, real-time chunking pins the committed rows,
unknown instructions and inconsistent manifests are refused, and the loop drives it with RTC at a multi-tick delay.
The architecture is the published one at test size (smolvla_config.tiny) with the Panda's 8 joints; the oracle is
the eager model's own stages chained in torch here, with inpainting written in this file.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from omni_vla.core.assembly import build_loop
from omni_vla.core.settings import LoopSettings
from omni_vla.inference.client import SyncInference, open_runtime
from omni_vla.runtime.bundle import BundleError
from omni_vla.runtime.registry import read_any_manifest
from omni_vla.runtime.vla import read_vla_manifest
from omni_vla_policies.vla.model import stage_modules
from vla_bundle import ARCH

BACKENDS = ("executorch", "mnn")
PARITY_DB = 40.0


@pytest.fixture(scope="module")
def model(tiny_vla):  # noqa: ANN001, ANN201
    return tiny_vla[0]


@pytest.fixture(scope="module")
def bundle(tiny_vla) -> Path:  # noqa: ANN001
    return tiny_vla[1]


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum((ref - got) ** 2.0), 1e-30)))


def eager(model, bundle: Path, images: dict, state: np.ndarray, text: str, noise: np.ndarray,  # noqa: ANN001
          prefix: np.ndarray | None = None, p: int = 0) -> np.ndarray:
    """The oracle: the eager stages, normalisation and inpainting as the manifest describes them."""
    m = read_vla_manifest(bundle)
    st = stage_modules(model)
    mean = np.asarray(m.normalization["state"].subtract, np.float32)
    std = np.asarray(m.normalization["state"].divide, np.float32)
    amean = np.asarray(m.normalization["action"].subtract, np.float32)
    astd = np.asarray(m.normalization["action"].divide, np.float32)
    n = m.language.max_tokens
    ids = m.language.table[text]
    tokens = torch.zeros(1, n, dtype=torch.int32)
    tokens[0, : len(ids)] = torch.tensor(ids)
    mask = torch.zeros(1, n)
    mask[0, : len(ids)] = 1
    padded = torch.zeros(1, ARCH.max_state_dim)
    padded[0, :8] = torch.from_numpy((state[0] - mean) / std)
    with torch.no_grad():
        tok = torch.cat([st["vision"](torch.from_numpy(images[c.name])) for c in m.cameras], dim=0)
        keys, values = st["prefix"](tok, tokens, mask, padded)
        x0 = torch.zeros(1, ARCH.chunk_size, ARCH.max_action_dim)
        x0[0, :, :8] = torch.from_numpy(noise[0])
        pinned = None if prefix is None else torch.from_numpy((prefix[0, :p] - amean) / astd)
        x = x0.clone()
        for i in range(ARCH.num_steps):
            t = 1.0 - i / ARCH.num_steps
            if p:
                x[0, :p, :8] = t * x0[0, :p, :8] + (1 - t) * pinned
            x = st["step"](x, torch.tensor([t]), keys, values, mask)
        if p:
            x[0, :p, :8] = pinned
        return st["finish"](x)[0].numpy() * astd + amean


def inputs(seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = ARCH.vision.image_size
    images = {c: rng.random((1, 3, s, s), dtype=np.float32) for c in ("front", "wrist")}
    state = (np.array([0, -0.3, 0, -2.2, 0, 1.9, 0.785, 0.04]) + 0.05 * rng.standard_normal(8)).astype(np.float32)
    return images, state[None], rng.standard_normal((1, ARCH.chunk_size, 8)).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_chained_stages_compute_what_the_eager_model_computes(model, bundle: Path, backend: str) -> None:  # noqa: ANN001
    rt = open_runtime(backend, str(bundle), 1)
    text = "pick up the red cube"
    images, state, noise = inputs(0)
    out = np.zeros((rt.horizon, rt.action_dim), np.float32)
    rt.infer(images, state, rt.encode_instruction(text)[None], np.zeros_like(noise), 0, noise, out)
    ref = eager(model, bundle, images, state, text, noise)
    assert snr_db(ref - ref.mean(0), out - ref.mean(0)) >= PARITY_DB
    other = np.zeros_like(out)
    rt.infer(images, state, rt.encode_instruction("tap the yellow sphere")[None], np.zeros_like(noise), 0, noise, other)
    assert np.abs(other - out).max() > 1e-4, "the instruction's tokens must reach the actions"
    rt.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rtc_pins_the_committed_rows_and_the_flow_continues_from_them(model, bundle: Path, backend: str) -> None:  # noqa: ANN001
    rt = open_runtime(backend, str(bundle), 1)
    text = "tap the yellow sphere"
    images, state, noise = inputs(1)
    prefix = (state[0] + 0.01 * np.arange(ARCH.chunk_size)[:, None]).astype(np.float32)[None]
    out, free = np.zeros((rt.horizon, rt.action_dim), np.float32), np.zeros((rt.horizon, rt.action_dim), np.float32)
    p = rt.max_prefix
    rt.infer(images, state, rt.encode_instruction(text)[None], prefix, p, noise, out)
    rt.infer(images, state, rt.encode_instruction(text)[None], prefix, 0, noise, free)
    np.testing.assert_allclose(out[:p], prefix[0, :p], atol=1e-5)
    ref = eager(model, bundle, images, state, text, noise, prefix, p)
    assert snr_db(ref[p:] - ref.mean(0), out[p:] - ref.mean(0)) >= PARITY_DB
    assert np.abs(out[p:] - free[p:]).max() > 1e-4, "the pinned rows must condition the rest of the chunk"
    with pytest.raises(ValueError, match=r"prefix_len must be an int in 0\.\.6"):
        rt.infer(images, state, rt.encode_instruction(text)[None], prefix, p + 1, noise, out)
    rt.close()


def test_an_instruction_outside_the_language_table_is_refused_naming_the_table(bundle: Path) -> None:
    rt = open_runtime("mnn", str(bundle), 1)
    with pytest.raises(KeyError, match="not in the bundle's language table; expected one of .*pick up the red cube"):
        rt.encode_instruction("dance")
    rt.close()


def _edited(bundle: Path, tmp: Path, edit) -> Path:  # noqa: ANN001
    out = tmp / "edited"
    shutil.copytree(bundle, out)
    raw = json.loads((out / "manifest.json").read_text())
    edit(raw)
    (out / "manifest.json").write_text(json.dumps(raw))
    return out


@pytest.mark.parametrize("edit, why", [
    (lambda m: m["flow"].update(max_prefix=8), "max_prefix 8 must be < chunk_length 8"),
    (lambda m: m["stages"].pop("finish"), "stages .* expected"),
    (lambda m: m["stages"]["prefix"]["inputs"][1].update(dtype="float32"), "lang_tokens must be int32"),
    (lambda m: m["stages"]["step"]["inputs"][2].update(shape=[1, 2, 3, 4]), "stage step input shapes"),
    (lambda m: m["language"]["table"].update(go=[1] * 7), "1..6 token ids"),
    (lambda m: m["cameras"][1].update(height=32), "vision stage's resolution"),
    (lambda m: m["normalization"].pop("action"), "normalization keys"),
    (lambda m: m["flow"].update(padded_action_dim=4), "exceed the padded widths"),
])
def test_an_inconsistent_manifest_is_refused_at_load_naming_the_problem(bundle: Path, tmp_path: Path, edit, why: str) -> None:  # noqa: ANN001
    with pytest.raises(BundleError, match=why):
        read_any_manifest(_edited(bundle, tmp_path, edit))


def test_a_replaced_artifact_is_refused_before_anything_runs(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    shutil.copytree(bundle, out)
    (out / "step.mnn").write_bytes(b"\0" * (out / "step.mnn").stat().st_size)
    with pytest.raises(BundleError, match="step.mnn sha256"):
        open_runtime("mnn", str(out), 1)


def test_the_loop_runs_the_vla_with_rtc_at_a_multi_tick_delay_without_starving(bundle: Path) -> None:
    """Delay 2 ticks, 3 executed per chunk of 8: every request pins the committed rows, and the queue never runs dry."""
    rt = open_runtime("mnn", str(bundle), 1)
    m = read_vla_manifest(bundle)
    loop = build_loop(LoopSettings(rate_hz=0, execution_horizon=0, strategy="rtc", joint_names=m.joint_names,
                                   noise_scale=1.0), SyncInference(rt, delay_ticks=2, period_s=0.1))
    s = ARCH.vision.image_size
    qpos = np.array([0, -0.3, 0, -2.2, 0, 1.9, 0.785, 0.04])
    actions, pinned = [], []
    for tick in range(40):
        now = 0.1 * tick
        obs = {"front": np.full((s, s, 3), 90, np.uint8), "wrist": np.full((s, s, 3), 160, np.uint8), "qpos": qpos,
               "qvel": np.zeros(8), "instruction": "pick up the red cube", "stamps": {"front": now, "wrist": now,
                                                                                       "joints": now}}
        a = loop.step(obs, tick, now)
        if a is not None:
            actions.append(a.copy())
            pinned.append(loop.controller.last_prefix_len)
    counts = loop.controller.counts
    assert counts["chunks"] >= 10 and counts["starved_ticks"] == 0 and len(actions) >= 37
    assert max(pinned) == 2, pinned  # d = 2 ticks pinned once the latency is known
    rt.close()


@pytest.mark.parametrize("args, why", [
    (["--rate-hz", "-1", "--execute-steps", "3"], "control_rate_hz: must be > 0"),
    (["--rate-hz", "10", "--execute-steps", "9"], "execute_steps 9 > chunk_length 8"),
    (["--rate-hz", "10", "--execute-steps", "3", "--max-prefix", "8"], "max_prefix 8 must be < chunk_length 8"),
    (["--rate-hz", "10", "--execute-steps", "3", "--backends", "executorch,tflite"], "unknown backend.*'tflite'"),
])
def test_bundle_vla_refuses_bad_settings_in_one_line_and_writes_nothing(bundle: Path, tmp_path: Path, capsys,  # noqa: ANN001
                                                                        args: list[str], why: str) -> None:
    from omni_vla_policies.vla.bundle_vla import main

    art = bundle.parent / "art"
    assert main([str(art), str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(why, err), err
    assert not (tmp_path / "out").exists()


def test_the_runtime_benchmark_times_whole_chunks_of_a_staged_bundle_on_each_robot_runtime(bundle: Path) -> None:
    """`omni-vla bench runtime` takes an imported VLA as it takes the reference: only --bundle changes."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(bundle),
                          "--threads", "1", "--reps", "3", "--warmup", "1", "--no-cold-start", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    [res] = json.loads(out.stdout)
    assert res["kind"] == "vla" and res["threads"] == 1 and res["reps"] == 3
    assert set(res["backends"]) == {"executorch", "mnn"}
    for stats in res["backends"].values():
        assert 0.0 < stats["median_ms"] <= stats["p99_ms"] and stats["load_s"] >= 0.0


def test_the_runtime_benchmark_times_each_stage_of_a_staged_bundle_against_its_flops(bundle: Path) -> None:
    """`--stages` on a VLA bundle: each stage alone per runtime, the chunk rebuilt from them, GFLOP/s from the FLOPs
    the manifest recorded at export (counted again here on the model the bundle was exported from)."""
    import subprocess
    import sys

    m = read_vla_manifest(bundle)
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(bundle),
                          "--threads", "1", "--reps", "3", "--warmup", "1", "--stages", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    [res] = json.loads(out.stdout)
    per = res["stages"]
    assert per["calls_per_chunk"] == {"vision": len(m.cameras), "prefix": 1, "step": m.flow.num_steps, "finish": 1}
    assert per["flops"] == {s: m.stages[s].flops for s in per["calls_per_chunk"]}
    assert all(per["flops"][s] > 0 for s in ("vision", "prefix", "step")) and per["sgemm_gflops"] > 0.0
    assert set(per["backends"]) == {"executorch", "mnn"}
    for b, got in per["backends"].items():
        st = got["stages"]
        for s, calls in per["calls_per_chunk"].items():
            assert 0.0 < st[s]["median_ms"] <= st[s]["p99_ms"]
            if per["flops"][s]:  # finish only slices and scales: no matmul for torch's counter
                assert st[s]["gflops"] == pytest.approx(per["flops"][s] / st[s]["median_ms"] / 1e6, rel=0.01,
                                                         abs=0.01)
        rebuilt = sum(calls * st[s]["median_ms"] for s, calls in per["calls_per_chunk"].items())
        assert got["chain_ms"] == pytest.approx(rebuilt, abs=0.1)


def test_the_stage_flops_in_a_manifest_are_those_of_the_model_it_was_exported_from(model, bundle: Path) -> None:  # noqa: ANN001
    from omni_vla_policies.vla.export_vla import stage_flops

    m = read_vla_manifest(bundle)
    assert {s: m.stages[s].flops for s in m.stages} == stage_flops(model)


def test_the_runtime_benchmark_refuses_stages_of_a_single_pass_bundle_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    single = tmp_path / "single"  # what the benchmark reads before it refuses: the kind
    single.mkdir()
    (single / "manifest.json").write_text(json.dumps({"format": "omni_vla.bundle/3", "kind": "chunk"}))
    out = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "runtime", "--bundle", str(single),
                          "--stages", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--stages" in out.stderr.splitlines()[-1] and "single-pass" in out.stderr.splitlines()[-1]