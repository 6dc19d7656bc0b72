"""Instruction -> embedding without torch: bundle lookup table, else the exported MiniLM text encoder.

The policy was trained on all-MiniLM-L6-v2 sentence embeddings (mean pooling over the attention
mask, L2-normalised, 384-d). Known instructions come from the bundle's embeddings.npz (committed,
small); a new instruction needs the text-encoder artifacts (tokenizer.json + .mnn/.pte, ~90 MB fp32,
generated at set-up by `omni-vla export --text-encoder BUNDLE`). Tokenisation uses the Rust
`tokenizers` package, which imports no torch, so the MNN path stays torch-free. Called when the
instruction changes, never per tick.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from tokenizers import Tokenizer as HFTokenizer

from omni_vla.backends import ArtifactFormat
from omni_vla.runtime.bundle import (
    ArtifactSpec, BundleError, BundleManifest, check_version, read_json_model, verify_artifact,
)

TextEncoderFn = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (input_ids, attention_mask) -> embedding

TEXT_ENCODER_FORMAT = "omni_vla.text_encoder/1"
TEXT_ENCODER_DIR = "text_encoder"
TEXT_MANIFEST_NAME = "text_encoder.json"


class InstructionError(KeyError):
    """An instruction the bundle cannot embed (unknown text and no text encoder installed)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TextEncoderManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["omni_vla.text_encoder/1"]
    encoder: str
    max_tokens: int
    embedding_dim: int
    tokenizer: ArtifactSpec
    artifacts: dict[ArtifactFormat, ArtifactSpec]
    versions: dict[str, str]


def instruction_key(text: str) -> str:
    """Lookup key: the uncased MiniLM tokenizer maps case and whitespace variants to the same tokens."""
    return " ".join(text.split()).lower()


def load_table(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        texts, emb = z["texts"], z["embeddings"].astype(np.float32)
    if emb.ndim != 2 or len(texts) != len(emb):
        raise BundleError(f"{path}: embeddings table shape {emb.shape} does not match {len(texts)} texts")
    return {instruction_key(str(t)): emb[i].copy() for i, t in enumerate(texts)}


class Tokenizer:
    """WordPiece tokenizer of the encoder, fixed length (static graph shapes)."""

    def __init__(self, tokenizer_json: Path, max_tokens: int) -> None:
        self.tok = HFTokenizer.from_file(str(tokenizer_json))
        self.tok.enable_truncation(max_length=max_tokens)
        self.tok.enable_padding(length=max_tokens, pad_id=0, pad_token="[PAD]")
        self.ids = np.zeros((1, max_tokens), np.int32)
        self.mask = np.zeros((1, max_tokens), np.int32)

    def __call__(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        enc = self.tok.encode(text)
        self.ids[0] = enc.ids
        self.mask[0] = enc.attention_mask
        return self.ids, self.mask


class InstructionEncoder:
    """encode(text) -> float32 [embedding_dim]; table hit, else text encoder, else InstructionError.

    `make_encoder(artifact, num_threads)` builds the backend's encoder from the text encoder's artifact for
    `backend` (runtime/mnn.py, runtime/executorch.py); None: this backend runs no text encoder.
    """

    def __init__(self, bundle_dir: Path, manifest: BundleManifest, backend: str, num_threads: int = 1,
                 make_encoder: Callable[[Path, int], TextEncoderFn] | None = None) -> None:
        self.dim = manifest.embedding_dim
        self.table = load_table(verify_artifact(bundle_dir, manifest.instruction.table))
        for k, v in self.table.items():
            if v.shape != (self.dim,):
                raise BundleError(f"embedding for {k!r} has shape {v.shape}, expected ({self.dim},)")
        self._encoder: TextEncoderFn | None = None
        self._tokenizer: Tokenizer | None = None
        te_dir = bundle_dir / TEXT_ENCODER_DIR
        self.text_encoder_available = (te_dir / TEXT_MANIFEST_NAME).is_file()
        if self.text_encoder_available:
            te = read_json_model(te_dir / TEXT_MANIFEST_NAME, TextEncoderManifest, TEXT_ENCODER_FORMAT)
            if te.embedding_dim != self.dim:
                raise BundleError(f"text encoder gives {te.embedding_dim}-d embeddings, policy expects {self.dim}")
            spec = te.artifacts.get(backend)  # type: ignore[arg-type]
            if make_encoder is None or spec is None:
                self.text_encoder_available = False
            else:
                check_version(te.versions, backend)
                self._tokenizer = Tokenizer(verify_artifact(te_dir, te.tokenizer), te.max_tokens)
                self._encoder = make_encoder(verify_artifact(te_dir, spec), num_threads)

    @property
    def known_instructions(self) -> list[str]:
        return sorted(self.table)

    def encode(self, text: str) -> np.ndarray:
        if not isinstance(text, str) or not text.strip():
            raise InstructionError(f"instruction must be a non-empty string, got {text!r}")
        hit = self.table.get(instruction_key(text))
        if hit is not None:
            return hit.copy()
        if self._encoder is None or self._tokenizer is None:
            raise InstructionError(
                f"instruction {text!r} is not in the bundle's embedding table and no text encoder is installed "
                f"(run `omni-vla export --text-encoder <bundle>`); known: {self.known_instructions}")
        emb = self._encoder(*self._tokenizer(text))
        if emb.shape != (self.dim,) or not np.all(np.isfinite(emb)):
            raise BundleError(f"text encoder returned {emb.shape} / non-finite values for {text!r}")
        return emb.copy()
