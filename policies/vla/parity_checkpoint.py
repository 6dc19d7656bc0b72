"""An imported VLA bundle (SmolVLA, pi0, pi0.5) against the eager fp32 model rebuilt from the checkpoint it was
imported from: what `omni-vla parity --bundle` prints for such a bundle, so a user can re-check a bundle after
copying it to a robot or upgrading a runtime (the import records the same figure in `source.parity_db`).

Both sides run through the same runtime code (tokeniser, normalisation, Euler loop) on one seeded observation;
against LeRobot's own pipeline instead, see parity_import.py.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.runtime.bundle import BundleError, sha256_file
from omni_vla.runtime.registry import read_any_manifest
from omni_vla.runtime.vla_manifest import VLAManifest
from omni_vla.tools.outputs import native_stdout_silenced
from omni_vla_policies.lerobot_import import checkpoint_kind
from omni_vla_policies.lerobot_pi0 import build_pi0, read_pi0_checkpoint
from omni_vla_policies.lerobot_smolvla import built, read_smolvla_checkpoint
from omni_vla_policies.vla.parity_import import self_parity


def reference_build(checkpoint: Path, tokenizer: Path, weights_sha256: str) -> Callable:
    """A picklable callable building the float model from `checkpoint`; weights other than the ones the bundle was
    imported from are refused in one line (the figure would compare two different policies)."""
    kind = checkpoint_kind(checkpoint)
    if kind == "smolvla":
        ck = read_smolvla_checkpoint(checkpoint, tokenizer)
        make = partial(built, ck.arch, ck.weights)
    elif kind in ("pi0", "pi05"):
        ck = read_pi0_checkpoint(checkpoint, tokenizer)  # type: ignore[assignment]
        make = partial(build_pi0, ck.arch, ck.weights)
    else:
        raise BundleError(f"{checkpoint}: a {kind} checkpoint, but the bundle is a staged VLA (SmolVLA, pi0, pi0.5)")
    if sha256_file(ck.weights) != weights_sha256:
        raise BundleError(f"{ck.weights}: not the weights this bundle was imported from (sha256 differs); "
                          "expected the checkpoint named in its manifest's source")
    return make


def run_vla_parity(bundle_dir: Path, seed: int = 0, checkpoint: Path | None = None) -> dict:
    """Each robot runtime the bundle holds against the eager fp32 model (end-to-end SNR of one chunk, dB)."""
    manifest = read_any_manifest(bundle_dir)
    if not isinstance(manifest, VLAManifest):
        raise BundleError(f"{bundle_dir}: not a staged VLA bundle")
    source = manifest.source
    src = Path(checkpoint) if checkpoint is not None else Path(str(source.get("checkpoint", "")))
    if not (src / "config.json").is_file():
        raise BundleError(f"{bundle_dir}: the checkpoint it was imported from ({src}) is not there; expected "
                          "--checkpoint DIR naming where it is now")
    if not source.get("weights_sha256"):
        raise BundleError(f"{bundle_dir}: its manifest names no source.weights_sha256, so the checkpoint cannot be "
                          "shown to be the one imported; expected a bundle written by `omni-vla import lerobot`")
    build = reference_build(src, Path(bundle_dir) / "tokenizer.json", str(source["weights_sha256"]))
    backends = tuple(b for b in ROBOT_BACKENDS if all(b in s.artifacts for s in manifest.stages.values()))
    if not backends:
        raise BundleError(f"{bundle_dir}: no stage has programs for a robot runtime; expected one of "
                          f"{', '.join(ROBOT_BACKENDS)}")
    with native_stdout_silenced():  # MNN prints to fd 1
        snr = self_parity(Path(bundle_dir), build, backends, seed)
    return {"bundle": str(bundle_dir), "policy": manifest.policy, "checkpoint": str(src), "seed": seed,
            "observations": 1, "source": "synthetic (one seeded observation)",
            "quantization": source.get("quantization", "none"), "end_to_end_snr_db": snr,
            "recorded_at_import_db": source.get("parity_db")}
