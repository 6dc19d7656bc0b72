"""Checkpoint -> policy bundle: per stage an ExecuTorch .pte (XNNPACK), an ONNX file and an MNN model.

Stages (static shapes, raw values in and out, normalisation inside the graphs):
  prefix: front, wrist [1,3,S,S] in [0,1], state [1,D], instruction [1,E]  -> context [1,L,W]
  flow:   context, state, noise [1,H,D], prefix [1,H,D], prefix_mask [1,H,1] -> actions [1,H,D], as three
          programs the runtime chains (omni_vla/runtime/flow.py):
    flow_init:   context, state, noise, prefix, prefix_mask -> x [H,D], per block k_i, v_i
    flow_step:   x, prefix_mask, step (one-hot [1,N]), k_0, v_0, ... -> x_next [H,D]   (run N times)
    flow_finish: x, state, prefix, prefix_mask -> actions [1,H,D]
  (all exported in the folded form of export_fold.py; parity is measured against the training model)
MNN conversion goes through ONNX and the converter module that the MNN wheel ships (`_tools`), never
the `mnnconvert` console script (it phones home and pip-installs a protobuf downgrade at run time).

    python -m omni_vla_policies.export --checkpoint runs/policy.pt --out bundles/reference
    python -m omni_vla_policies.export --text-encoder bundles/reference   # adds the ~90 MB MiniLM artifacts
"""
from __future__ import annotations

import argparse
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from omni_vla.backends import ARTIFACT_FORMATS, ROBOT_BACKENDS
from omni_vla.runtime.bundle import (
    BUNDLE_FORMAT, BundleManifest, InstructionSpec, NormalizationSpec, StageSpec, TensorSpec, TrainingInfo,
    artifact_spec, write_manifest,
)
from omni_vla.tools.errors import UsageError, choice_list, existing_bundle, existing_file, positive_int
from omni_vla_policies.converters import convert_mnn, export_onnx, export_pte, versions
from omni_vla_policies.export_fold import GRAPH as FOLDED_FLOW_GRAPH
from omni_vla_policies.export_fold import PREFIX_GRAPH as FOLDED_PREFIX_GRAPH
from omni_vla_policies.export_fold import FoldedFlowHead, folded, folded_prefix
from omni_vla_policies.model import ModelConfig, VLAPolicy
from omni_vla_policies.text_encoder import encode_texts, export_text_encoder
from omni_vla_sim.tasks import TASKS

CHECKPOINT_FORMAT = "omni_vla_policies.ckpt/1"


class PrefixStage(nn.Module):
    """The prefix encoder in its folded export form (export_fold.py): same weights and function, fewer ops."""

    def __init__(self, policy: VLAPolicy) -> None:
        super().__init__()
        self.enc = folded_prefix(policy.prefix_encoder)

    def forward(self, front: Tensor, wrist: Tensor, state: Tensor, instruction: Tensor) -> Tensor:
        return self.enc(front, wrist, state, instruction)


class _FlowProgram(nn.Module):
    """One of the folded flow head's programs (init, step or finish) as a module to export."""

    def __init__(self, head: FoldedFlowHead, program: str) -> None:
        super().__init__()
        self.head, self.program = head, program

    def forward(self, *args: Tensor) -> Tensor | tuple[Tensor, ...]:
        out = getattr(self.head, self.program)(*args)
        return tuple(out) if isinstance(out, list) else out


def flow_programs(policy: VLAPolicy) -> dict[str, nn.Module]:
    head = folded(policy.flow_head)
    return {f"flow_{p}": _FlowProgram(head, p).eval() for p in ("init", "step", "finish")}


def stage_specs(cfg: ModelConfig) -> dict[str, tuple[list[TensorSpec], list[TensorSpec]]]:
    s, d, h, e, w, L = cfg.image_size, cfg.action_dim, cfg.horizon, cfg.embedding_dim, cfg.width, cfg.context_len
    f = "float32"

    def t(name: str, *shape: int) -> TensorSpec:
        return TensorSpec(name=name, shape=shape, dtype=f)

    hd = w // cfg.heads
    kv = [x for i in range(cfg.head_layers) for x in (t(f"k_{i}", cfg.heads, hd, L), t(f"v_{i}", cfg.heads, L, hd))]
    return {
        "prefix": ([t("front", 1, 3, s, s), t("wrist", 1, 3, s, s), t("state", 1, d), t("instruction", 1, e)],
                   [t("context", 1, L, w)]),
        "flow_init": ([t("context", 1, L, w), t("state", 1, d), t("noise", 1, h, d), t("prefix", 1, h, d),
                       t("prefix_mask", 1, h, 1)], [t("x", h, d), *kv]),
        "flow_step": ([t("x", h, d), t("prefix_mask", 1, h, 1), t("step", 1, cfg.num_steps), *kv], [t("x_next", h, d)]),
        "flow_finish": ([t("x", h, d), t("state", 1, d), t("prefix", 1, h, d), t("prefix_mask", 1, h, 1)],
                        [t("actions", 1, h, d)]),
    }


def example_inputs(specs: list[TensorSpec], seed: int = 0) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in specs:
        x = torch.rand(t.shape, generator=g) if t.name in ("front", "wrist") else torch.randn(t.shape, generator=g)
        if t.name == "prefix_mask":
            x = (torch.arange(t.shape[1]) < 2).float().view(t.shape)
        elif t.name == "step":
            x = torch.eye(t.shape[1])[:1]
        out.append(x)
    return tuple(out)


def load_checkpoint(path: str | Path) -> dict:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:  # torch's way of saying "not a torch file"
        raise ValueError(f"{path}: not an omni_vla policy checkpoint (torch.load: {exc})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not an omni_vla policy checkpoint (format {CHECKPOINT_FORMAT})")
    return ckpt


def save_checkpoint(ckpt: dict, path: str | Path) -> None:
    """Atomic torch.save of a checkpoint dict (weights, config, stats; no optimizer state)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, path)


def policy_from_checkpoint(ckpt: dict) -> VLAPolicy:
    model = VLAPolicy(ModelConfig.from_dict(ckpt["model_config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def _write_table(path: Path, texts: list[str], embeddings: np.ndarray) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, texts=np.array(texts, dtype=np.str_), embeddings=np.asarray(embeddings, np.float32))
    os.replace(tmp, path)


# Actions executed per chunk the reference policy was validated at (docs/results.md, "execution horizon 12": 91% against
# 88% for 8 on validation seeds, H = 16); written into the manifest as the loop's default.
EXECUTE_STEPS = 12


def export_bundle(ckpt: dict, out_dir: str | Path, backends: tuple[str, ...] = ARTIFACT_FORMATS,
                  executorch_dtype: str = "float32", execute_steps: int = EXECUTE_STEPS) -> Path:
    """Write the bundle into a temporary sibling directory, then swap it in (an existing text_encoder/ is kept).

    `executorch_dtype` float16 makes the .pte programs compute in half precision (XNNPACK's fp16 kernels)
    behind a float32 interface; the manifest records it and `omni-vla parity` measures what it costs.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    model = policy_from_checkpoint(ckpt)
    cfg = model.cfg
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    work.chmod(0o755)
    try:
        stages: dict[str, StageSpec] = {}
        modules = {"prefix": PrefixStage(model).eval(), **flow_programs(model)}
        for name, (ins, outs) in stage_specs(cfg).items():
            args = example_inputs(ins)
            in_names, out_names = [t.name for t in ins], [t.name for t in outs]
            arts = {}
            with torch.no_grad():
                if "executorch" in backends:
                    export_pte(modules[name], args, work / f"{name}.pte", executorch_dtype)
                    arts["executorch"] = artifact_spec(work, f"{name}.pte", executorch_dtype)
                if "onnx" in backends or "mnn" in backends:
                    export_onnx(modules[name], args, in_names, out_names, work / f"{name}.onnx")
                    arts["onnx"] = artifact_spec(work, f"{name}.onnx")
                if "mnn" in backends:
                    convert_mnn(work / f"{name}.onnx", work / f"{name}.mnn")
                    arts["mnn"] = artifact_spec(work, f"{name}.mnn")
            stages[name] = StageSpec(inputs=ins, outputs=outs, artifacts=arts,
                                     graph=FOLDED_PREFIX_GRAPH if name == "prefix" else FOLDED_FLOW_GRAPH)
        _write_table(work / "embeddings.npz", list(ckpt["instructions"]), ckpt["instruction_embeddings"])
        save_checkpoint(ckpt, work / "policy.pt")
        norm = ckpt["normalization"]
        manifest = BundleManifest(
            format=BUNDLE_FORMAT, joint_names=list(ckpt["joint_names"]), control_rate_hz=float(ckpt["control_rate_hz"]),
            horizon=cfg.horizon, action_dim=cfg.action_dim, num_steps=cfg.num_steps, max_prefix=cfg.max_prefix,
            image_size=cfg.image_size, embedding_dim=cfg.embedding_dim, execute_steps=execute_steps,
            normalization=NormalizationSpec(action_mode=cfg.action_mode, **norm),
            instruction=InstructionSpec(table=artifact_spec(work, "embeddings.npz")),
            stages=stages, versions=versions(), torch_checkpoint=artifact_spec(work, "policy.pt"),
            training=TrainingInfo(seed=int(ckpt["seed"]), dataset_sha256=str(ckpt["dataset_sha256"]),
                                  checkpoint_sha256=str(ckpt.get("checkpoint_sha256", "")), steps=int(ckpt["steps"]),
                                  final_loss=ckpt.get("final_loss"), config=dict(ckpt.get("train_config", {}))),
        )
        write_manifest(work, manifest)
        old_te = out_dir / "text_encoder"
        if old_te.is_dir():
            shutil.copytree(old_te, work / "text_encoder")
        if out_dir.exists():
            trash = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
            os.replace(out_dir, trash)
            os.replace(work, out_dir)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(work, out_dir)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return out_dir


def with_task_instructions(ckpt: dict, encode: Callable[[list[str]], np.ndarray] | None = None) -> dict:
    """Add embeddings of the task suite's untrained phrasings to the lookup table (MiniLM unless `encode`).

    They are what the text encoder would produce on the robot; the policy never trained on them,
    which is what the held-out language evaluation measures.
    """
    encode = encode_texts if encode is None else encode
    known = list(ckpt["instructions"])
    extra = [i.text for t in TASKS.values() for i in t.instructions if i.text not in known]
    if not extra:
        return ckpt
    emb = np.vstack([np.asarray(ckpt["instruction_embeddings"], np.float32), np.asarray(encode(extra), np.float32)])
    return {**ckpt, "instructions": known + extra, "instruction_embeddings": emb}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="omni-vla export", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=existing_file, help="training checkpoint (.pt)")
    p.add_argument("--out", type=Path, help="bundle directory to write")
    p.add_argument("--text-encoder", type=existing_bundle, metavar="BUNDLE",
                   help="add the MiniLM text-encoder artifacts (from the installed wheel) to BUNDLE")
    p.add_argument("--text-backends", type=choice_list(ROBOT_BACKENDS), default=list(ROBOT_BACKENDS),
                   help="comma list for --text-encoder")
    p.add_argument("--quantize-text", action="store_true", help="8-bit MNN text-encoder weights (~4x smaller)")
    p.add_argument("--executorch-dtype", choices=["float32", "float16"], default="float32",
                   help="what the .pte programs compute in (float32 interface either way)")
    p.add_argument("--execute-steps", type=positive_int, default=EXECUTE_STEPS,
                   help="actions executed per chunk, the loop's default for this bundle (<= the chunk length)")
    p.add_argument("--task-instructions", action="store_true",
                   help="also embed every phrasing of the sim task suite (held-out ones included) into the table")
    a = p.parse_args(argv)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    if a.text_encoder is not None:
        d = export_text_encoder(a.text_encoder, backends=tuple(a.text_backends), quantize=a.quantize_text)
        print(f"text encoder written to {d}")
        return 0
    if a.checkpoint is None or a.out is None:
        p.error("--checkpoint and --out are required (or --text-encoder BUNDLE)")
    if a.out.exists() and not a.out.is_dir():
        raise UsageError(f"--out {a.out}: is a file (expected a bundle directory to write)")
    ckpt = load_checkpoint(a.checkpoint)
    if a.task_instructions:
        ckpt = with_task_instructions(ckpt)
    out = export_bundle(ckpt, a.out, executorch_dtype=a.executorch_dtype, execute_steps=a.execute_steps)
    print(f"bundle written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
