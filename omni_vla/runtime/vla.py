"""A kind-"vla" bundle (format 3, runtime/vla_manifest.py) behind the loop's PolicyRuntime interface.

One inference: `vision` per camera into one token buffer, `prefix` -> the KV cache (copied into the step's input
buffers once), `num_steps` x `step` from time 1 (noise) to 0, `finish`; normalisation, padding and the language
table are applied here in numpy, into buffers allocated once. The backend's loader (`load_program` of
runtime/mnn.py or runtime/executorch.py) is passed in, so the MNN path imports no torch.

Real-time chunking pins committed actions by inpainting: before each step at time t the pinned rows of the robot's
action columns are set to t * noise + (1 - t) * prefix (the flow's own interpolation), and after the last step to
the prefix itself, so the chunk starts exactly where the committed actions are. The graphs are the model alone:
pinning needs no re-export. The padded action columns start at zero, not at fresh noise as LeRobot draws them:
finish cuts them, and the loop's noise (noise_scale) stays the one source of randomness, so noise_scale 0 gives
deterministic chunks here as with every other bundle.

A bundle with `language.state_prompt` (pi0.5) tokenises its prompt on every inference: its instruction vector
carries the instruction's text (byte count, then UTF-8 bytes), and the normalised state's bins go into the template.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer

from omni_vla.backends import LIBRARY_OF
from omni_vla.cameras import CameraInput
from omni_vla.runtime.base import check_array
from omni_vla.runtime.bundle import MANIFEST_NAME, BundleError, check_version, read_json_model, verify_artifact
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT, ChunkStageSpec
from omni_vla.runtime.registry import sniff_kind
from omni_vla.runtime.vla_manifest import VLA_KIND, VLA_STAGES, VLAManifest

# (artifact, stage spec, the runtime's input buffers, threads) -> run() returning every output (overwritten next run)
LoadProgram = Callable[[Path, ChunkStageSpec, Sequence[np.ndarray], int], Callable[[], Sequence[np.ndarray]]]


def is_vla_bundle(bundle_dir: str | Path) -> bool:
    """Whether `bundle_dir`'s manifest declares format 3 kind vla (read without validating the rest)."""
    return sniff_kind(bundle_dir) == VLA_KIND


def read_vla_manifest(bundle_dir: str | Path) -> VLAManifest:
    return read_json_model(Path(bundle_dir) / MANIFEST_NAME, VLAManifest, CHUNK_FORMAT)


class StagedVLARuntime:
    """PolicyRuntime over a kind-"vla" bundle on one backend (see runtime/base.py for the interface)."""

    def __init__(self, bundle_dir: str | Path, backend: str, load_program: LoadProgram, num_threads: int = 1,
                 check_versions: bool = True, warmup: bool = True, manifest: VLAManifest | None = None) -> None:
        """`manifest`: the bundle's, when the caller has read it (runtime/registry.py read_any_manifest)."""
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        self.bundle_dir = Path(bundle_dir)
        self.manifest = m = read_vla_manifest(self.bundle_dir) if manifest is None else manifest
        check_version(m.versions, LIBRARY_OF[backend], strict=check_versions)  # type: ignore[index]
        self.backend, self.num_threads = backend, num_threads
        self.cameras = tuple(CameraInput(c.name, c.height, c.width) for c in m.cameras)
        self.joint_names = m.joint_names
        self.horizon, self.action_dim = m.action.chunk_length, len(m.action.joint_names)
        self.max_prefix, self.num_steps = m.flow.max_prefix, m.flow.num_steps
        self.control_rate_hz, self.execute_steps = m.control_rate_hz, m.action.execute_steps
        self.embedding_dim = 2 * m.language.max_tokens  # token ids, then their mask (both exact in float32)
        self._state_dim = len(m.state.joint_names)
        self._bufs = {s: [np.zeros(t.shape, np.float32 if t.dtype == "float32" else np.int32)
                          for t in m.stages[s].inputs] for s in VLA_STAGES}
        self._runs = {}
        for stage in VLA_STAGES:
            spec = m.stages[stage].artifacts.get(backend)  # type: ignore[call-overload]
            if spec is None:
                raise BundleError(f"{self.bundle_dir}: stage {stage} has no {backend} artifact; it has "
                                  f"{sorted(m.stages[stage].artifacts)}")
            path = verify_artifact(self.bundle_dir, spec)
            self._runs[stage] = load_program(path, m.stages[stage], self._bufs[stage], num_threads)
        self._tokenizer = self._load_tokenizer()
        sp = m.language.state_prompt
        self._state_prompt = sp
        self._bin_edges = None if sp is None else np.linspace(-1.0, 1.0, sp.bins + 1)[:-1]
        self._norm = {k: (np.asarray(a.subtract, np.float32), np.asarray(a.divide, np.float32))
                      for k, a in m.normalization.items()}
        self._noise = np.zeros(self._bufs["step"][0].shape, np.float32)  # full padded width
        self._pinned = np.zeros((self.horizon, self.action_dim), np.float32)  # normalised prefix rows
        self._scratch = np.zeros_like(self._pinned)
        if warmup:
            self._warm()

    def _load_tokenizer(self) -> Tokenizer | None:
        """The bundle's tokenizer, checked against its hash, truncating as LeRobot's processor does (special tokens
        counted in max_tokens) and never padding (the ids are padded here, masked)."""
        spec = self.manifest.language.tokenizer_file
        if spec is None:
            return None
        path = verify_artifact(self.bundle_dir, spec)
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises its own Exception subclass on a malformed file
            raise BundleError(f"{path}: not a tokenizers JSON ({exc})") from exc
        tok.no_padding()
        tok.enable_truncation(self.manifest.language.max_tokens)
        return tok

    def token_ids(self, text: str) -> list[int]:
        """The prefix's language ids for `text`: the bundle's tokenizer, or its table (unknown text refused)."""
        lang = self.manifest.language
        if self._tokenizer is not None:
            ids = self._tokenizer.encode(text + lang.prompt_suffix).ids
            if not ids:
                raise KeyError(f"instruction {text!r} has no tokens; expected a non-empty instruction")
            return ids
        if text not in lang.table:
            raise KeyError(f"instruction {text!r} is not in the bundle's language table; expected one of "
                           f"{sorted(lang.table)}")
        return lang.table[text]

    def prompt_token_ids(self, text: str, normalised_state: np.ndarray) -> list[int]:
        """A state-prompt bundle's ids for `text` and one normalised state (Pi05PrepareStateTokenizerProcessorStep)."""
        sp = self._state_prompt
        assert sp is not None and self._tokenizer is not None and self._bin_edges is not None
        clean = text.strip().replace("_", " ").replace("\n", " ")
        bins = np.digitize(normalised_state, self._bin_edges) - 1
        prompt = sp.template.replace("{task}", clean).replace("{state}", " ".join(str(int(b)) for b in bins))
        return self._tokenizer.encode(prompt).ids

    def encode_instruction(self, text: str) -> np.ndarray:
        """float32 [2 * max_tokens]: the token ids padded, then the mask; a state-prompt bundle's: the byte count,
        then the UTF-8 bytes (each exact in float32), tokenised with the state by infer."""
        lang = self.manifest.language
        if self._state_prompt is not None:
            data = text.encode("utf-8")
            if not text.strip() or len(data) >= self.embedding_dim:
                raise KeyError(f"instruction {text!r}: expected a non-empty text of at most "
                               f"{self.embedding_dim - 1} UTF-8 bytes")
            out = np.zeros(self.embedding_dim, np.float32)
            out[0] = len(data)
            out[1:1 + len(data)] = np.frombuffer(data, np.uint8)
            return out
        ids = self.token_ids(text)
        out = np.zeros(self.embedding_dim, np.float32)
        out[: len(ids)] = ids
        out[lang.max_tokens: lang.max_tokens + len(ids)] = 1.0
        return out

    def infer(self, images: Mapping[str, np.ndarray], state: np.ndarray, instruction: np.ndarray,
              prefix: np.ndarray, prefix_len: int, noise: np.ndarray, out: np.ndarray) -> None:
        h, d, n = self.horizon, self.action_dim, self.manifest.language.max_tokens
        for cam in self.cameras:
            check_array(cam.name, images.get(cam.name), (1, 3, cam.height, cam.width))
        check_array("state", state, (1, self._state_dim))
        check_array("instruction", instruction, (1, self.embedding_dim))
        check_array("prefix", prefix, (1, h, d))
        check_array("noise", noise, (1, h, d))
        check_array("out", out, (h, d))
        if not isinstance(prefix_len, (int, np.integer)) or not 0 <= int(prefix_len) <= self.max_prefix:
            raise ValueError(f"prefix_len must be an int in 0..{self.max_prefix}, got {prefix_len!r}")
        vision, pre, step = self._bufs["vision"][0], self._bufs["prefix"], self._bufs["step"]
        for i, cam in enumerate(self.cameras):
            np.copyto(vision, images[cam.name])
            np.copyto(pre[0][i], self._runs["vision"]()[0][0])
        sub, div = self._norm["state"]
        pre[3].fill(0.0)
        np.subtract(state[0], sub, out=pre[3][0, : self._state_dim])
        np.divide(pre[3][0, : self._state_dim], div, out=pre[3][0, : self._state_dim])
        if self._state_prompt is None:
            np.copyto(pre[1][0], instruction[0, :n], casting="unsafe")
            np.copyto(pre[2][0], instruction[0, n:])
        else:
            self._write_prompt(instruction[0], pre[3][0, : self._state_dim], pre[1][0], pre[2][0])
        np.copyto(step[4], pre[2])
        keys, values = self._runs["prefix"]()
        np.copyto(step[2], keys)
        np.copyto(step[3], values)
        self._denoise(noise, prefix, int(prefix_len))
        np.copyto(self._bufs["finish"][0], step[0])
        sub, div = self._norm["action"]
        np.multiply(self._runs["finish"]()[0][0], div, out=out)
        np.add(out, sub, out=out)

    def _write_prompt(self, instruction: np.ndarray, normalised_state: np.ndarray, tokens: np.ndarray,
                      mask: np.ndarray) -> None:
        count = int(instruction[0])
        if not 0 < count < self.embedding_dim:
            raise ValueError(f"instruction: byte count {instruction[0]!r}; expected a vector from encode_instruction")
        text = instruction[1:1 + count].astype(np.uint8).tobytes().decode("utf-8", "replace")
        ids = self.prompt_token_ids(text, normalised_state)
        tokens.fill(0)
        mask.fill(0.0)
        tokens[: len(ids)] = ids
        mask[: len(ids)] = 1.0

    def _denoise(self, noise: np.ndarray, prefix: np.ndarray, p: int) -> None:
        """Euler from time 1 to 0 in step's own x buffer; pinned rows inpainted before each step and at the end."""
        d, x, t = self.action_dim, self._bufs["step"][0], self._bufs["step"][1]
        self._noise[0, :, :d] = noise[0]  # the padded columns stay 0
        if p:
            sub, div = self._norm["action"]
            np.subtract(prefix[0, :p], sub, out=self._pinned[:p])
            np.divide(self._pinned[:p], div, out=self._pinned[:p])
        np.copyto(x, self._noise)
        dt = -1.0 / self.num_steps
        for i in range(self.num_steps):
            t[0] = 1.0 + i * dt
            if p:
                self._inpaint(float(t[0]), p)
            np.copyto(x, self._runs["step"]()[0])
        if p:
            x[0, :p, :d] = self._pinned[:p]

    def _inpaint(self, time: float, p: int) -> None:
        """x[:p, :d] = time * noise + (1 - time) * pinned (written in place)."""
        d = self.action_dim
        rows, scratch = self._bufs["step"][0][0, :p, :d], self._scratch[:p]
        np.multiply(self._noise[0, :p, :d], time, out=rows)
        np.multiply(self._pinned[:p], 1.0 - time, out=scratch)
        rows += scratch

    def _warm(self) -> None:
        h, d = self.horizon, self.action_dim
        images = {c.name: np.full((1, 3, c.height, c.width), 0.5, np.float32) for c in self.cameras}
        text = next(iter(self.manifest.language.table), "warm up")
        state = np.zeros((1, self._state_dim), np.float32)
        state[0] = self._norm["state"][0]
        zeros = np.zeros((1, h, d), np.float32)
        self.infer(images, state, self.encode_instruction(text)[None], zeros, 0, zeros, np.zeros((h, d), np.float32))

    def stage_program(self, stage: str) -> Callable[[], list[np.ndarray]]:
        """One stage's loaded program on its preallocated inputs (as the last `infer` left them): a stage timed alone."""
        return self._runs[stage]

    def close(self) -> None:
        self._runs = {}
