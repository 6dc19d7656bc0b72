"""pi0 and pi0.5 in plain torch, as LeRobot 0.6.1 computes them (policies/pi0/modeling_pi0.py, pi05/modeling_pi05.py,
pi_gemma.py), with parameter names that load LeRobot's state_dict, split into the staged bundle's four programs.

The stages keep the kind-"vla" contract of runtime/vla_manifest.py (vision -> prefix -> step x N -> finish):
- vision: SigLIP (no pixel shuffle) and PaliGemma's biased projector; images not scaled, language by sqrt(width).
- prefix: the PaliGemma text layers over images + language (all bidirectional among valid tokens) -> the KV cache.
  pi0's state token sits in the suffix, but its attention row sees only the prefix and itself: its expert K/V do not
  depend on the noisy actions or the time, so the prefix stage computes them too and appends them to the cache as
  one more position. The step stage then attends to cache + its own action tokens, as LeRobot's does.
- step: the expert (Gemma, (1 + w) RMSNorm; pi0.5: adaptive RMSNorm scale/shift/gate from the time MLP) on the
  action tokens, joint attention to the cache, one Euler step x + dt * v.
pi0.5's state reaches the model as prompt tokens (256 bins), made on the host; its prefix ignores `state`.
Arithmetic is laid out for XNNPACK as in model.py (RowMean norms, one additive mask bias, bmm attention).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from pydantic import BaseModel, ConfigDict
from torch import Tensor, nn

from omni_vla_policies.vla.model import (FinishStage, LayerNorm, RowMean, VisionLayer, apply_rope, attention,
                                         example_lang_mask, fitted_size, gelu_tanh, mask_bias, time_embedding)
from omni_vla_policies.vla.smolvla_config import StagedVlaShape, VisionArch
from omni_vla_policies.vla.weights import prefix_rename, stream_weights

# LeRobot's compute_layer_complete reshapes the joint attention with `1 * 8 * head_dim`: 8 query heads, always.
GEMMA_HEADS = 8
SIGLIP_HEAD_DIM = 72  # So400m/14: 1152 wide, 16 heads; the checkpoint stores no head count
ROPE_THETA = 10_000.0
GEMMA_EPS = 1e-6


class GemmaArch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    width: int
    depth: int
    mlp_dim: int
    num_heads: int = GEMMA_HEADS
    num_kv_heads: int = 1
    head_dim: int


class Pi0Arch(StagedVlaShape):
    """What shapes the network (read from the checkpoint)."""

    pi05: bool
    vlm: GemmaArch
    expert: GemmaArch
    vocab_size: int = 257152

    @property
    def image_tokens(self) -> int:
        return (self.vision.image_size // self.vision.patch_size) ** 2

    @property
    def vlm_len(self) -> int:
        """Images then language: the positions the PaliGemma layers compute."""
        return self.cameras * self.image_tokens + self.tokenizer_max_length

    @property
    def prefix_len(self) -> int:
        """Positions in the KV cache: pi0 adds its state token's."""
        return self.vlm_len + (0 if self.pi05 else 1)

    # the names the generic VLA tools (stage_specs, the manifest) read
    @property
    def num_vlm_layers(self) -> int:
        return self.vlm.depth

    @property
    def text(self) -> _TextView:
        """Width of the image tokens and layout of the cache (hidden_size, num_key_value_heads, head_dim)."""
        return _TextView(self.vlm)


class _TextView:
    """The three names of SmolVLA's TextArch that bundle_vla.stage_specs reads, for the PaliGemma text model."""

    def __init__(self, g: GemmaArch) -> None:
        self.hidden_size, self.num_key_value_heads, self.head_dim = g.width, g.num_kv_heads, g.head_dim


class GemmaNorm(nn.Module):
    """GemmaRMSNorm / PiGemmaRMSNorm without a condition: x * rsqrt(mean(x^2) + eps) * (1 + w)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.row_mean = RowMean(dim)

    def forward(self, x: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        return x * torch.rsqrt(self.row_mean(x * x) + GEMMA_EPS) * (1.0 + self.weight), None


class AdaNorm(nn.Module):
    """PiGemmaRMSNorm with a condition (pi0.5's expert): normed * (1 + scale) + shift, and the residual's gate."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, 3 * dim)
        self.row_mean = RowMean(dim)
        self.dim = dim

    def forward(self, x: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        assert cond is not None
        mod = self.dense(cond)[:, None]
        d = self.dim
        scale, shift, gate = mod[..., :d], mod[..., d:2 * d], mod[..., 2 * d:]
        return x * torch.rsqrt(self.row_mean(x * x) + GEMMA_EPS) * (1.0 + scale) + shift, gate


class GemmaLayer(nn.Module):
    def __init__(self, g: GemmaArch, adaptive: bool = False) -> None:
        super().__init__()
        norm = AdaNorm if adaptive else GemmaNorm
        self.input_layernorm = norm(g.width)
        self.post_attention_layernorm = norm(g.width)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(g.width, g.num_heads * g.head_dim, bias=False)
        self.self_attn.k_proj = nn.Linear(g.width, g.num_kv_heads * g.head_dim, bias=False)
        self.self_attn.v_proj = nn.Linear(g.width, g.num_kv_heads * g.head_dim, bias=False)
        self.self_attn.o_proj = nn.Linear(g.num_heads * g.head_dim, g.width, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(g.width, g.mlp_dim, bias=False)
        self.mlp.up_proj = nn.Linear(g.width, g.mlp_dim, bias=False)
        self.mlp.down_proj = nn.Linear(g.mlp_dim, g.width, bias=False)
        self.g = g

    def qkv(self, h: Tensor, rope: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Queries and keys with RoPE, values: (B, L, heads, head_dim)."""
        b, n, g, a = h.shape[0], h.shape[1], self.g, self.self_attn
        q = apply_rope(a.q_proj(h).view(b, n, g.num_heads, g.head_dim), rope)
        k = apply_rope(a.k_proj(h).view(b, n, g.num_kv_heads, g.head_dim), rope)
        return q, k, a.v_proj(h).view(b, n, g.num_kv_heads, g.head_dim)

    def finish(self, x: Tensor, att: Tensor, gate: Tensor | None, cond: Tensor | None) -> Tensor:
        """o_proj + (gated) residual, then the tanh-GeGLU MLP + (gated) residual."""
        y = self.self_attn.o_proj(att)
        x = x + (y if gate is None else y * gate)
        h, gate = self.post_attention_layernorm(x, cond)
        m = self.mlp
        y = m.down_proj(gelu_tanh(m.gate_proj(h)) * m.up_proj(h))
        return x + (y if gate is None else y * gate)


def rope_tables(positions: Tensor, head_dim: int) -> tuple[Tensor, Tensor]:
    """Gemma's rotary cos/sin for positions (B, L): (B, L, 1, D/2) each (rotate_half layout, as model.apply_rope)."""
    inv = 1.0 / ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    radians = (positions[..., None] * inv)[..., None, :]
    return torch.cos(radians), torch.sin(radians)


class Siglip(nn.Module):
    """SiglipVisionTransformer without its head: patch embedding + learned positions 0..N-1, layers, final norm."""

    def __init__(self, v: VisionArch) -> None:
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.patch_embedding = nn.Conv2d(3, v.hidden_size, v.patch_size, stride=v.patch_size)
        self.embeddings.position_embedding = nn.Embedding((v.image_size // v.patch_size) ** 2, v.hidden_size)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(VisionLayer(v) for _ in range(v.num_hidden_layers))
        self.post_layernorm = LayerNorm(v.hidden_size, eps=v.layer_norm_eps)

    def forward(self, pixels: Tensor) -> Tensor:
        x = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        x = x + self.embeddings.position_embedding.weight[None]
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)


class Stack(nn.Module):
    """`embed_tokens` + `layers` (PaliGemma's language model: its final norm only feeds the unused lm_head), or
    `layers` + `norm` (the expert)."""

    def __init__(self, g: GemmaArch, adaptive: bool, vocab: int | None) -> None:
        super().__init__()
        if vocab is not None:
            self.embed_tokens = nn.Embedding(vocab, g.width)
        self.layers = nn.ModuleList(GemmaLayer(g, adaptive) for _ in range(g.depth))
        if vocab is None:
            self.norm = AdaNorm(g.width) if adaptive else GemmaNorm(g.width)


class Pi0(nn.Module):
    """Every weight pi0 / pi0.5 computes with at inference, named after LeRobot's state_dict (minus the lm_heads)."""

    def __init__(self, arch: Pi0Arch) -> None:
        super().__init__()
        self.arch = arch
        v, e = arch.vision, arch.expert
        self.vision_tower = nn.Module()
        self.vision_tower.vision_model = Siglip(v)
        self.multi_modal_projector = nn.Module()
        self.multi_modal_projector.linear = nn.Linear(v.hidden_size, arch.vlm.width)
        self.language_model = Stack(arch.vlm, False, arch.vocab_size)
        self.gemma_expert = Stack(e, arch.pi05, None)
        self.action_in_proj = nn.Linear(arch.max_action_dim, e.width)
        self.action_out_proj = nn.Linear(e.width, arch.max_action_dim)
        if arch.pi05:
            self.time_mlp_in = nn.Linear(e.width, e.width)
            self.time_mlp_out = nn.Linear(e.width, e.width)
        else:
            self.state_proj = nn.Linear(arch.max_state_dim, e.width)
            self.action_time_mlp_in = nn.Linear(2 * e.width, e.width)
            self.action_time_mlp_out = nn.Linear(e.width, e.width)


PREFIXES = (("model.paligemma_with_expert.paligemma.model.", ""),
            ("model.paligemma_with_expert.gemma_expert.model.", "gemma_expert."), ("model.", ""))
UNUSED = ("paligemma_with_expert.paligemma.lm_head.", "paligemma_with_expert.gemma_expert.lm_head.",
          "language_model.norm.")  # after the prefixes are stripped


def load_lerobot_weights(model: Pi0, path: str | Path) -> None:
    """Load PI0Policy / PI05Policy's model.safetensors (LeRobot's names) tensor by tensor; the two lm_heads and the
    VLM's final norm are never used at inference."""
    stream_weights(model, path, prefix_rename(PREFIXES, UNUSED), "LeRobot pi0 state_dict")


def centred_fit(hw: tuple[int, int], size: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """resize_with_pad_torch's resized (h, w) and its (left, right, top, bottom) zeros (`fitted_size`)."""
    rh, rw = fitted_size(hw, size)
    top, left = (size - rh) // 2, (size - rw) // 2
    return (rh, rw), (left, size - rw - left, top, size - rh - top)


class VisionStage(nn.Module):
    """One camera in [0, 1] at its resolution -> its image tokens (embed_image of the image * 2 - 1), resized first
    as resize_with_pad_torch does when the camera is not the encoder's size: bilinear to fit keeping the aspect
    ratio, clamped to [0, 1], zeros padded evenly on both sides (the odd pixel right / bottom)."""

    def __init__(self, m: Pi0) -> None:
        super().__init__()
        self.m = m
        a = m.arch
        self.fit = None if a.camera_hw is None else centred_fit(a.camera_hw, a.vision.image_size)

    def forward(self, image: Tensor) -> Tensor:
        if self.fit is not None:
            size, pads = self.fit
            image = F.interpolate(image, size=size, mode="bilinear", align_corners=False).clamp(0.0, 1.0)
            image = F.pad(image, pads, value=0.0)
        x = self.m.vision_tower.vision_model(image * 2.0 - 1.0)
        return self.m.multi_modal_projector.linear(x)


class PrefixStage(nn.Module):
    """Image tokens + language (+ pi0's state) -> every layer's K and V (the prefix pass with use_cache=True; for pi0
    the state token's expert K/V appended as the last position)."""

    def __init__(self, m: Pi0) -> None:
        super().__init__()
        self.m = m

    def forward(self, image_tokens: Tensor, lang_tokens: Tensor, lang_mask: Tensor,
                state: Tensor) -> tuple[Tensor, Tensor]:
        m, a, g = self.m, self.m.arch, self.m.arch.vlm
        n_img = a.cameras * a.image_tokens
        img = image_tokens.reshape(1, n_img, g.width)
        lang = m.language_model.embed_tokens(lang_tokens.long()) * math.sqrt(g.width)
        x = torch.cat([img, lang], dim=1)
        pad = torch.cat([torch.ones(1, n_img), lang_mask], dim=1)
        allowed = pad[:, None, :] * pad[:, :, None] > 0.5
        rope = rope_tables(torch.cumsum(pad, dim=1) - 1.0, g.head_dim)
        bias = mask_bias(allowed, g.num_heads // g.num_kv_heads)
        s = None
        if not a.pi05:  # the state token: attends to the valid prefix and itself, at position sum(pad)
            s = m.state_proj(state)[:, None]
            s_rope = rope_tables(pad.sum(dim=1, keepdim=True), g.head_dim)
            s_bias = mask_bias(torch.cat([pad > 0.5, torch.ones(1, 1) > 0.5], dim=1)[:, None, :],
                               g.num_heads // g.num_kv_heads)
        keys, values = [], []
        layers = list(zip(m.language_model.layers, m.gemma_expert.layers))
        for i, (layer, expert) in enumerate(layers):
            h, _ = layer.input_layernorm(x)
            q, k, v = layer.qkv(h, rope)
            last = i + 1 == len(layers)
            if s is not None:
                hs, _ = expert.input_layernorm(s)
                qs, ks, vs = expert.qkv(hs, s_rope)
                att_s = attention(qs, torch.cat([k, ks], dim=1), torch.cat([v, vs], dim=1), s_bias, g.num_kv_heads)
                k, v = torch.cat([k, ks], dim=1), torch.cat([v, vs], dim=1)
                if not last:
                    s = expert.finish(s, att_s, None, None)
            keys.append(k)
            values.append(v)
            if not last:
                x = layer.finish(x, attention(q, k[:, :a.vlm_len], v[:, :a.vlm_len], bias, g.num_kv_heads), None, None)
        return torch.cat(keys, dim=0), torch.cat(values, dim=0)


class StepStage(nn.Module):
    """One Euler step: x_t, t and the cache -> x_t + dt * v_t (denoise_step, dt = -1 / num_steps)."""

    def __init__(self, m: Pi0) -> None:
        super().__init__()
        self.m = m

    def forward(self, x_t: Tensor, time: Tensor, keys: Tensor, values: Tensor, lang_mask: Tensor) -> Tensor:
        m, a, e = self.m, self.m.arch, self.m.arch.expert
        n = a.chunk_size
        te = time_embedding(time, e.width, a.min_period, a.max_period)
        emb = m.action_in_proj(x_t)
        if a.pi05:
            cond = F.silu(m.time_mlp_out(F.silu(m.time_mlp_in(te))))
            x = emb
        else:
            cond = None
            x = m.action_time_mlp_out(F.silu(m.action_time_mlp_in(
                torch.cat([emb, te[:, None].expand(1, n, e.width)], dim=2))))
        cached = [torch.ones(1, a.cameras * a.image_tokens), lang_mask] + ([] if a.pi05 else [torch.ones(1, 1)])
        pad = torch.cat(cached, dim=1)
        allowed = torch.cat([pad, torch.ones(1, n)], dim=1)[:, None, :].expand(1, n, a.prefix_len + n) > 0.5
        bias = mask_bias(allowed, e.num_heads // e.num_kv_heads)
        rope = rope_tables(pad.sum(dim=1, keepdim=True) + torch.arange(n, dtype=torch.float32)[None], e.head_dim)
        for i, layer in enumerate(m.gemma_expert.layers):
            h, gate = layer.input_layernorm(x, cond)
            q, k, v = layer.qkv(h, rope)
            att = attention(q, torch.cat([keys[i:i + 1], k], dim=1), torch.cat([values[i:i + 1], v], dim=1), bias,
                            e.num_kv_heads)
            x = layer.finish(x, att, gate, cond)
        h, _ = m.gemma_expert.norm(x, cond)
        return x_t + (-1.0 / a.num_steps) * m.action_out_proj(h)


def stage_modules(m: Pi0) -> dict[str, nn.Module]:
    return {"vision": VisionStage(m).eval(), "prefix": PrefixStage(m).eval(), "step": StepStage(m).eval(),
            "finish": FinishStage(m).eval()}


def stage_inputs(arch: Pi0Arch, seed: int = 0, valid_tokens: int | None = None) -> dict[str, tuple[Tensor, ...]]:
    """Example inputs of every stage (fixed shapes): what the exporters trace."""
    g = torch.Generator().manual_seed(seed)
    n = arch.tokenizer_max_length
    lang_mask = example_lang_mask(n, valid_tokens)
    kv = (arch.vlm.depth, arch.prefix_len, arch.vlm.num_kv_heads, arch.vlm.head_dim)
    return {
        "vision": (torch.rand(1, 3, *arch.camera_shape, generator=g),),
        "prefix": (torch.randn(arch.cameras, arch.image_tokens, arch.vlm.width, generator=g),
                   torch.randint(0, arch.vocab_size, (1, n), generator=g, dtype=torch.int32), lang_mask,
                   torch.randn(1, arch.max_state_dim, generator=g)),
        "step": (torch.randn(1, arch.chunk_size, arch.max_action_dim, generator=g), torch.ones(1),
                 torch.randn(*kv, generator=g), torch.randn(*kv, generator=g), lang_mask),
        "finish": (torch.randn(1, arch.chunk_size, arch.max_action_dim, generator=g),),
    }


@torch.no_grad()
def sample_actions(m: Pi0, images: list[Tensor], lang_tokens: Tensor, lang_mask: Tensor, state: Tensor,
                   noise: Tensor) -> Tensor:
    """End to end through the stages as a runtime chains them (state: normalised, padded; unused by pi0.5)."""
    st = stage_modules(m)
    tokens = torch.cat([st["vision"](img) for img in images], dim=0)
    keys, values = st["prefix"](tokens, lang_tokens, lang_mask, state)
    x = noise
    for i in range(m.arch.num_steps):
        x = st["step"](x, torch.tensor([1.0 + i * (-1.0 / m.arch.num_steps)]), keys, values, lang_mask)
    return st["finish"](x)
