"""SmolVLA in plain torch, layer for layer as LeRobot 0.4.4 computes it (smolvlm_with_expert.py, modeling_smolvla.py),
with parameter names that load LeRobot's state_dict (`load_lerobot_weights`).

Plain modules instead of transformers' classes: every op is one the exporters take with static shapes (no
cache objects, no attention-implementation dispatch, no data-dependent control flow). The arithmetic is
rearranged where ExecuTorch's XNNPACK delegate would otherwise fall back to portable kernels between delegate
partitions: norms take their means as constant-weight linears, masks become one additive bias per stage, RoPE
tables are computed once per stage, grouped-query attention is 3-D bmm without repeating the KV cache. Parity
against LeRobot's own code is what shows the rewrite is exact.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from omni_vla_policies.vla.smolvla_config import SmolVLAArch, TextArch, VisionArch
from omni_vla_policies.vla.weights import prefix_rename, stream_weights


class RowMean(nn.Module):
    """Mean over the last dim as a linear layer with constant weights 1/d: XNNPACK delegates it, where it leaves
    mean.dim on 3-D tensors to ExecuTorch's portable kernels (each one a graph break between delegate partitions)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.full((1, dim), 1.0 / dim), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight)


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm's parameters and result, computed with ops XNNPACK delegates (it has no layer_norm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__(dim, eps=eps)
        self.row_mean = RowMean(dim)

    def forward(self, x: Tensor) -> Tensor:
        xc = x - self.row_mean(x)
        return xc * torch.rsqrt(self.row_mean(xc * xc) + self.eps) * self.weight + self.bias


def gelu_tanh(x: Tensor) -> Tensor:
    """SigLIP's gelu_pytorch_tanh written out: ExecuTorch 1.5's XNNPACK GELU ignores approximate="tanh" (runs the
    exact erf GELU; FIELD_NOTES), which cost the vision stage 50 dB of parity."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class VisionLayer(nn.Module):
    """SigLIP encoder layer (pre-norm attention + tanh-GELU MLP)."""

    def __init__(self, v: VisionArch) -> None:
        super().__init__()
        self.heads = v.num_attention_heads
        self.layer_norm1 = LayerNorm(v.hidden_size, eps=v.layer_norm_eps)
        self.layer_norm2 = LayerNorm(v.hidden_size, eps=v.layer_norm_eps)
        self.self_attn = nn.Module()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self.self_attn, name, nn.Linear(v.hidden_size, v.hidden_size))
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(v.hidden_size, v.intermediate_size)
        self.mlp.fc2 = nn.Linear(v.intermediate_size, v.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        h = self.layer_norm1(x)
        a = self.self_attn
        hd = d // self.heads
        q, k, v = (p(h).view(b, n, self.heads, hd).transpose(1, 2).reshape(b * self.heads, n, hd)
                   for p in (a.q_proj, a.k_proj, a.v_proj))
        att = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) * hd ** -0.5, dim=-1), v)
        x = x + a.out_proj(att.reshape(b, self.heads, n, hd).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp.fc2(gelu_tanh(self.mlp.fc1(self.layer_norm2(x))))


def vision_position_ids(v: VisionArch) -> Tensor:
    """SmolVLMVisionEmbeddings' position ids for a full image, computed with its own float32 ops: they are not
    0..N-1 (the (1 - 1e-6) factor puts some patch rows/columns into the previous bucket)."""
    side = v.image_size // v.patch_size
    boundaries = torch.arange(1 / side, 1.0, 1 / side)
    frac = torch.arange(side, dtype=torch.float32) / side * (1 - 1e-6)
    bucket = torch.bucketize(frac, boundaries, right=True)
    return (bucket[:, None] * side + bucket[None, :]).flatten()


class VisionModel(nn.Module):
    """SmolVLMVisionTransformer on a full, unpadded image (no patch mask)."""

    def __init__(self, v: VisionArch) -> None:
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.patch_embedding = nn.Conv2d(3, v.hidden_size, v.patch_size, stride=v.patch_size)
        self.embeddings.position_embedding = nn.Embedding((v.image_size // v.patch_size) ** 2, v.hidden_size)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(VisionLayer(v) for _ in range(v.num_hidden_layers))
        self.post_layernorm = LayerNorm(v.hidden_size, eps=v.layer_norm_eps)
        self.register_buffer("position_ids", vision_position_ids(v), persistent=False)

    def forward(self, pixels: Tensor) -> Tensor:
        x = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        x = x + self.embeddings.position_embedding(self.position_ids)[None]
        for layer in self.encoder.layers:
            x = layer(x)
        return self.post_layernorm(x)


def pixel_shuffle(x: Tensor, scale: int) -> Tensor:
    """SmolVLMConnector.pixel_shuffle: (B, S, D) -> (B, S / scale^2, D * scale^2)."""
    b, s, d = x.shape
    side = int(math.isqrt(s))
    x = x.reshape(b, side, side // scale, d * scale).permute(0, 2, 1, 3)
    x = x.reshape(b, side // scale, side // scale, d * scale * scale).permute(0, 2, 1, 3)
    return x.reshape(b, s // scale ** 2, d * scale ** 2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.row_mean = RowMean(dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * (x * torch.rsqrt(self.row_mean(x * x) + self.eps))


class LlamaLayer(nn.Module):
    """A Llama decoder layer's parameters; SmolVLA runs the attention itself (KV cache, cross-attention)."""

    def __init__(self, t: TextArch, hidden: int, intermediate: int, kv_in: int) -> None:
        super().__init__()
        kv = t.num_key_value_heads * t.head_dim
        self.input_layernorm = RMSNorm(hidden, t.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(hidden, t.rms_norm_eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(hidden, t.num_attention_heads * t.head_dim, bias=False)
        self.self_attn.k_proj = nn.Linear(kv_in, kv, bias=False)
        self.self_attn.v_proj = nn.Linear(kv_in, kv, bias=False)
        self.self_attn.o_proj = nn.Linear(t.num_attention_heads * t.head_dim, hidden, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.mlp.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.mlp.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def finish(self, x: Tensor, att: Tensor) -> Tensor:
        """o_proj + residual, then the gated MLP + residual."""
        x = x + self.self_attn.o_proj(att)
        m, h = self.mlp, self.post_attention_layernorm(x)
        return x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h))


def rope_tables(positions: Tensor, head_dim: int, max_wavelength: float = 10_000.0) -> tuple[Tensor, Tensor]:
    """cos and sin of smolvlm_with_expert.apply_rope's angles for positions (B, L): (B, L, 1, D/2) each, computed
    once per stage (every layer uses the same positions)."""
    exponents = (2.0 / head_dim) * torch.arange(head_dim // 2, dtype=torch.float32)
    radians = (positions[..., None] / (max_wavelength ** exponents))[..., None, :]
    return torch.cos(radians), torch.sin(radians)


def apply_rope(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """apply_rope on x (B, L, H, D) with precomputed tables."""
    cos, sin = rope
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def mask_bias(allowed: Tensor, groups: int) -> Tensor:
    """(B, Lq, Lk) bool -> additive (B, 1, groups * Lq, Lk): 0 where allowed, float32 min elsewhere. Adding it
    equals LeRobot's where(mask, w, min) after softmax, fully masked rows included (uniform either way), and
    is one add per layer that XNNPACK runs (it has no where)."""
    bias = (allowed.float() - 1.0) * -torch.finfo(torch.float32).min
    return bias.repeat(1, groups, 1)[:, None]


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, kv_heads: int) -> Tensor:
    """eager_attention_forward without repeating K/V: the query heads of each KV head are stacked along the
    sequence (GQA as one batched matmul per KV head), so no expand/copy of the cache per layer; bmm on 3-D tensors
    because a 4-D matmul decomposes into bmm behind expand copies that ExecuTorch runs outside XNNPACK."""
    b, lq, h, d = q.shape
    g, lk = h // kv_heads, k.shape[1]
    q = q.reshape(b, lq, kv_heads, g, d).permute(0, 2, 3, 1, 4).reshape(b * kv_heads, g * lq, d)
    k = k.permute(0, 2, 3, 1).reshape(b * kv_heads, d, lk)
    w = torch.bmm(q, k).reshape(b, kv_heads, g * lq, lk) * d ** -0.5 + bias
    p = torch.softmax(w, dim=-1).reshape(b * kv_heads, g * lq, lk)
    out = torch.bmm(p, v.permute(0, 2, 1, 3).reshape(b * kv_heads, lk, d))
    return out.reshape(b, kv_heads, g, lq, d).permute(0, 3, 1, 2, 4).reshape(b, lq, h * d)


class LlamaStack(nn.Module):
    """`layers` + `norm` (+ `embed_tokens` for the VLM text model), named like transformers' LlamaModel."""

    def __init__(self, layers: list[LlamaLayer], hidden: int, eps: float, vocab: int | None) -> None:
        super().__init__()
        if vocab is not None:
            self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(hidden, eps)


class SmolVLA(nn.Module):
    """All of SmolVLA's weights; the stages below compute with them. Names follow LeRobot's state_dict."""

    def __init__(self, arch: SmolVLAArch) -> None:
        super().__init__()
        self.arch = arch
        t, eh = arch.text, arch.expert_hidden
        kv = t.num_key_value_heads * t.head_dim
        self.vision_model = VisionModel(arch.vision)
        self.connector = nn.Module()
        self.connector.modality_projection = nn.Module()
        self.connector.modality_projection.proj = nn.Linear(
            arch.vision.hidden_size * arch.scale_factor ** 2, t.hidden_size, bias=False)
        self.text_model = LlamaStack([LlamaLayer(t, t.hidden_size, t.intermediate_size, t.hidden_size)
                                      for _ in range(arch.num_vlm_layers)], t.hidden_size, t.rms_norm_eps, t.vocab_size)
        self.lm_expert = LlamaStack([LlamaLayer(t, eh, arch.expert_intermediate, eh if self.is_self_attn(i) else kv)
                                     for i in range(arch.num_vlm_layers)], eh, t.rms_norm_eps, None)
        self.state_proj = nn.Linear(arch.max_state_dim, t.hidden_size)
        self.action_in_proj = nn.Linear(arch.max_action_dim, eh)
        self.action_out_proj = nn.Linear(eh, arch.max_action_dim)
        self.action_time_mlp_in = nn.Linear(2 * eh, eh)
        self.action_time_mlp_out = nn.Linear(eh, eh)

    def is_self_attn(self, layer: int) -> bool:
        """Expert layers attend jointly to prefix + actions every n-th layer, cross-attend to the prefix otherwise."""
        n = self.arch.self_attn_every_n_layers
        return n > 0 and layer % n == 0


LEROBOT_NAMES = prefix_rename((("model.vlm_with_expert.vlm.model.", ""), ("model.vlm_with_expert.lm_expert.", "lm_expert."),
                               ("model.", "")), ("vlm_with_expert.vlm.lm_head",))


def load_lerobot_weights(model: SmolVLA, path: str | Path) -> None:
    """Load SmolVLAPolicy's model.safetensors (LeRobot's names) tensor by tensor; the VLM's lm_head is never used."""
    stream_weights(model, path, LEROBOT_NAMES, "LeRobot SmolVLA state_dict")


def fitted_size(hw: tuple[int, int], size: int) -> tuple[int, int]:
    """The (h, w) a camera is resized to before padding to the encoder's square `size`, keeping the aspect ratio.
    In Python floats: traced from the image's shape, the TorchScript ONNX exporter computes it in float32
    (64 / (64 / 28) -> 27.99 -> 27), a row short of what the model's own code resizes to."""
    h, w = hw
    ratio = max(w / size, h / size)
    return int(h / ratio), int(w / ratio)


def resize_with_pad(image: Tensor, size: int) -> Tensor:
    """LeRobot's resize_with_pad to a square: bilinear to fit keeping the aspect ratio, zeros padded left and top."""
    rh, rw = fitted_size((int(image.shape[2]), int(image.shape[3])), size)
    resized = F.interpolate(image, size=(rh, rw), mode="bilinear", align_corners=False)
    return F.pad(resized, (size - rw, 0, size - rh, 0), value=0.0)


class VisionStage(nn.Module):
    """One camera: image in [0, 1] at the camera's resolution -> its image tokens (embed_image of img * 2 - 1),
    resized with padding to the encoder's size first when the camera is not that size (prepare_images)."""

    def __init__(self, m: SmolVLA) -> None:
        super().__init__()
        self.m = m

    def forward(self, image: Tensor) -> Tensor:
        size = self.m.arch.vision.image_size
        if tuple(image.shape[2:]) != (size, size):
            image = resize_with_pad(image, size)
        x = self.m.vision_model(image * 2.0 - 1.0)
        return self.m.connector.modality_projection.proj(pixel_shuffle(x, self.m.arch.scale_factor))


class PrefixStage(nn.Module):
    """Image tokens + language + state -> the KV cache of every VLM layer (the prefix pass, fill_kv_cache=True).

    Static shapes: language padded to tokenizer_max_length with `lang_mask` (1 valid / 0 pad, float); the 2-D
    attention mask and position ids are built in the graph from it, as embed_prefix/make_att_2d_masks do.
    The last layer only needs its K and V, so its attention output and MLP are not computed.
    """

    def __init__(self, m: SmolVLA) -> None:
        super().__init__()
        self.m = m

    def forward(self, image_tokens: Tensor, lang_tokens: Tensor, lang_mask: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        m, a, t = self.m, self.m.arch, self.m.arch.text
        img = image_tokens.reshape(1, a.cameras * a.image_tokens, t.hidden_size) * math.sqrt(t.hidden_size)
        lang = m.text_model.embed_tokens(lang_tokens.long()) * math.sqrt(t.hidden_size)
        x = torch.cat([img, lang, m.state_proj(state)[:, None]], dim=1)
        ones = torch.ones(1, a.cameras * a.image_tokens)
        pad = torch.cat([ones, lang_mask, torch.ones(1, 1)], dim=1)
        ar = torch.zeros(1, a.prefix_len)
        ar[:, -1] = 1.0
        cum = torch.cumsum(ar, dim=1)
        allowed = (cum[:, None, :] <= cum[:, :, None]) & (pad[:, None, :] * pad[:, :, None] > 0.5)
        rope = rope_tables(torch.cumsum(pad, dim=1) - 1.0, t.head_dim)
        bias = mask_bias(allowed, t.num_attention_heads // t.num_key_value_heads)
        keys, values = [], []
        for i, layer in enumerate(m.text_model.layers):
            h = layer.input_layernorm(x)
            q = layer.self_attn.q_proj(h).view(1, a.prefix_len, t.num_attention_heads, t.head_dim)
            k = apply_rope(layer.self_attn.k_proj(h).view(1, a.prefix_len, t.num_key_value_heads, t.head_dim), rope)
            v = layer.self_attn.v_proj(h).view(1, a.prefix_len, t.num_key_value_heads, t.head_dim)
            keys.append(k)
            values.append(v)
            if i + 1 < len(m.text_model.layers):
                x = layer.finish(x, attention(apply_rope(q, rope), k, v, bias, t.num_key_value_heads))
        return torch.cat(keys, dim=0), torch.cat(values, dim=0)


def time_embedding(time: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """create_sinusoidal_pos_embedding (LeRobot computes it in float64 on CPU; float32 here, within parity)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64)
    scale = (2 * math.pi / (min_period * (max_period / min_period) ** fraction)).to(torch.float32)
    arg = scale[None, :] * time[:, None]
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=1)


class StepStage(nn.Module):
    """One Euler step of the flow: x_t, t and the prefix KV cache -> x_t + dt * v_t (denoise_step, dt = -1/N)."""

    def __init__(self, m: SmolVLA) -> None:
        super().__init__()
        self.m = m

    def forward(self, x_t: Tensor, time: Tensor, keys: Tensor, values: Tensor, lang_mask: Tensor) -> Tensor:
        m, a, t = self.m, self.m.arch, self.m.arch.text
        n, eh = a.chunk_size, a.expert_hidden
        emb = m.action_in_proj(x_t)
        te = time_embedding(time, eh, a.min_period, a.max_period)[:, None].expand(1, n, eh)
        x = m.action_time_mlp_out(F.silu(m.action_time_mlp_in(torch.cat([emb, te], dim=2))))
        prefix_pad = torch.cat([torch.ones(1, a.cameras * a.image_tokens), lang_mask, torch.ones(1, 1)], dim=1) > 0.5
        causal = torch.ones(n, n).tril() > 0.5
        allowed_self = torch.cat([prefix_pad[:, None, :].expand(1, n, a.prefix_len), causal[None]], dim=2)
        allowed_cross = prefix_pad[:, None, :].expand(1, n, a.prefix_len)
        steps = torch.arange(n, dtype=torch.float32)[None]
        groups = t.num_attention_heads // t.num_key_value_heads
        rope_self = rope_tables(prefix_pad.float().sum(dim=1, keepdim=True) + steps, t.head_dim)
        rope_cross = rope_tables(steps, t.head_dim)
        bias_self, bias_cross = mask_bias(allowed_self, groups), mask_bias(allowed_cross, groups)
        for i, layer in enumerate(m.lm_expert.layers):
            h = layer.input_layernorm(x)
            q = layer.self_attn.q_proj(h).view(1, n, t.num_attention_heads, t.head_dim)
            kc, vc = keys[i:i + 1], values[i:i + 1]
            if m.is_self_attn(i):
                k = apply_rope(layer.self_attn.k_proj(h).view(1, n, t.num_key_value_heads, t.head_dim), rope_self)
                v = layer.self_attn.v_proj(h).view(1, n, t.num_key_value_heads, t.head_dim)
                att = attention(apply_rope(q, rope_self), torch.cat([kc, k], dim=1), torch.cat([vc, v], dim=1),
                                bias_self, t.num_key_value_heads)
            else:
                k = layer.self_attn.k_proj(kc.reshape(1, a.prefix_len, -1)).view(1, a.prefix_len, -1, t.head_dim)
                v = layer.self_attn.v_proj(vc.reshape(1, a.prefix_len, -1)).view(1, a.prefix_len, -1, t.head_dim)
                att = attention(apply_rope(q, rope_cross), k, v, bias_cross, t.num_key_value_heads)
            x = layer.finish(x, att)
        v_t = m.action_out_proj(m.lm_expert.norm(x))
        return x_t + (-1.0 / a.num_steps) * v_t


class FinishStage(nn.Module):
    """The denoised chunk -> the robot's action dimensions (LeRobot unpads max_action_dim to the action feature).
    Any staged model whose arch states its action_dim (SmolVLA, pi0)."""

    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.action_dim = m.arch.action_dim

    def forward(self, x: Tensor) -> Tensor:
        return x[:, :, :self.action_dim] * 1.0


def stage_modules(m: SmolVLA) -> dict[str, nn.Module]:
    return {"vision": VisionStage(m).eval(), "prefix": PrefixStage(m).eval(), "step": StepStage(m).eval(),
            "finish": FinishStage(m).eval()}


def example_lang_mask(n: int, valid_tokens: int | None) -> Tensor:
    """A language mask of n tokens, the first `valid_tokens` (default two thirds) real, the rest padding."""
    valid = n * 2 // 3 if valid_tokens is None else valid_tokens
    return torch.cat([torch.ones(1, valid), torch.zeros(1, n - valid)], dim=1)


def stage_inputs(arch: SmolVLAArch, seed: int = 0, valid_tokens: int | None = None) -> dict[str, tuple[Tensor, ...]]:
    """Example inputs of every stage (fixed shapes): what the exporters trace and the benchmark feeds."""
    g = torch.Generator().manual_seed(seed)
    t, n = arch.text, arch.tokenizer_max_length
    lang_mask = example_lang_mask(n, valid_tokens)
    kv = (arch.num_vlm_layers, arch.prefix_len, t.num_key_value_heads, t.head_dim)
    return {
        "vision": (torch.rand(1, 3, *arch.camera_shape, generator=g),),
        "prefix": (torch.randn(arch.cameras, arch.image_tokens, t.hidden_size, generator=g),
                   torch.randint(0, t.vocab_size, (1, n), generator=g, dtype=torch.int32), lang_mask,
                   torch.randn(1, arch.max_state_dim, generator=g)),
        "step": (torch.randn(1, arch.chunk_size, arch.max_action_dim, generator=g), torch.ones(1),
                 torch.randn(*kv, generator=g), torch.randn(*kv, generator=g), lang_mask),
        "finish": (torch.randn(1, arch.chunk_size, arch.max_action_dim, generator=g),),
    }


STAGE_IO = {
    "vision": (["image"], ["image_tokens"]),
    "prefix": (["image_tokens", "lang_tokens", "lang_mask", "state"], ["keys", "values"]),
    "step": (["x_t", "time", "keys", "values", "lang_mask"], ["x_next"]),
    "finish": (["x"], ["actions"]),
}


def step_time(arch: SmolVLAArch, i: int) -> float:
    """The flow time of step i, computed as sample_actions does (1 + i * dt)."""
    return 1.0 + i * (-1.0 / arch.num_steps)


@torch.no_grad()
def sample_actions(m: SmolVLA, images: list[Tensor], lang_tokens: Tensor, lang_mask: Tensor, state: Tensor,
                   noise: Tensor) -> Tensor:
    """End to end through the stages, as a runtime chains them: vision per camera, prefix, N steps, finish."""
    st = stage_modules(m)
    tokens = torch.cat([st["vision"](img) for img in images], dim=0)
    keys, values = st["prefix"](tokens, lang_tokens, lang_mask, state)
    x = noise
    for i in range(m.arch.num_steps):
        x = st["step"](x, torch.tensor([step_time(m.arch, i)]), keys, values, lang_mask)
    return st["finish"](x)
