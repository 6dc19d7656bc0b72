"""ACT (Action Chunking Transformer) at inference, written for export: LeRobot's architecture, loaded from its weights.

Only what a robot runs: the VAE encoder is a training device (at inference the latent is zero, so its token is
the latent projection's bias), dropout is off, and FrozenBatchNorm2d folds into the convolution before it. Inputs
and outputs are normalised (the bundle's runtime applies the checkpoint's statistics), so the graph is the
network alone. Attention is spelled out in matmuls (batch first, batch 1) so ExecuTorch and MNN take it as is.
Parity against LeRobot's own ACTPolicy is measured by tests/policies/test_lerobot_import.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

BN_EPS = 1e-5  # torchvision's FrozenBatchNorm2d
RESNET_BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}  # BasicBlock ResNets


@dataclass(frozen=True)
class ActShape:
    """What the weights alone do not say (from LeRobot's config.json)."""

    cameras: int
    image_hw: tuple[int, int]
    state_dim: int
    env_dim: int  # observation.environment_state size; 0: none (its token is absent)
    action_dim: int
    chunk_size: int
    dim_model: int
    n_heads: int
    n_encoder_layers: int
    n_decoder_layers: int
    pre_norm: bool
    activation: str
    backbone: str


class _Conv(nn.Module):
    """Convolution with its frozen batch norm folded in (scale into the weights, shift into the bias)."""

    def __init__(self, weights: dict[str, np.ndarray], conv: str, bn: str, stride: int, padding: int) -> None:
        super().__init__()
        w = torch.from_numpy(weights[f"{conv}.weight"])
        scale = torch.from_numpy(weights[f"{bn}.weight"]) * torch.rsqrt(
            torch.from_numpy(weights[f"{bn}.running_var"]) + BN_EPS)
        shift = torch.from_numpy(weights[f"{bn}.bias"]) - torch.from_numpy(weights[f"{bn}.running_mean"]) * scale
        self.conv = nn.Conv2d(w.shape[1], w.shape[0], w.shape[2], stride, padding, bias=True)
        self.conv.weight.data = w * scale[:, None, None, None]
        self.conv.bias.data = shift

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class _BasicBlock(nn.Module):
    def __init__(self, weights: dict[str, np.ndarray], p: str, stride: int) -> None:
        super().__init__()
        self.conv1 = _Conv(weights, f"{p}.conv1", f"{p}.bn1", stride, 1)
        self.conv2 = _Conv(weights, f"{p}.conv2", f"{p}.bn2", 1, 1)
        self.down = _Conv(weights, f"{p}.downsample.0", f"{p}.downsample.1", stride, 0) \
            if f"{p}.downsample.0.weight" in weights else None

    def forward(self, x: Tensor) -> Tensor:
        skip = x if self.down is None else self.down(x)
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + skip)


class _Backbone(nn.Module):
    """torchvision's ResNet up to layer4 (what LeRobot's IntermediateLayerGetter returns)."""

    def __init__(self, weights: dict[str, np.ndarray], p: str, blocks: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = _Conv(weights, f"{p}.conv1", f"{p}.bn1", 2, 3)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layers = nn.Sequential(*[
            _BasicBlock(weights, f"{p}.layer{i + 1}.{j}", 2 if (i > 0 and j == 0) else 1)
            for i, n in enumerate(blocks) for j in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(self.pool(torch.relu(self.stem(x))))


def _linear(weights: dict[str, np.ndarray], p: str) -> nn.Linear:
    w = torch.from_numpy(weights[f"{p}.weight"])
    layer = nn.Linear(w.shape[1], w.shape[0])
    layer.weight.data, layer.bias.data = w, torch.from_numpy(weights[f"{p}.bias"])
    return layer


def _norm(weights: dict[str, np.ndarray], p: str) -> nn.LayerNorm:
    w = torch.from_numpy(weights[f"{p}.weight"])
    layer = nn.LayerNorm(w.shape[0])
    layer.weight.data, layer.bias.data = w, torch.from_numpy(weights[f"{p}.bias"])
    return layer


class _Attention(nn.Module):
    """nn.MultiheadAttention's arithmetic from its weights (in_proj split into q, k, v), batch first."""

    def __init__(self, weights: dict[str, np.ndarray], p: str, n_heads: int) -> None:
        super().__init__()
        w, b = torch.from_numpy(weights[f"{p}.in_proj_weight"]), torch.from_numpy(weights[f"{p}.in_proj_bias"])
        d = w.shape[1]
        self.q, self.k, self.v = (nn.Linear(d, d) for _ in range(3))
        for i, layer in enumerate((self.q, self.k, self.v)):
            layer.weight.data, layer.bias.data = w[i * d:(i + 1) * d].clone(), b[i * d:(i + 1) * d].clone()
        self.out = _linear(weights, f"{p}.out_proj")
        self.heads, self.head_dim = n_heads, d // n_heads

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        def split(x: Tensor) -> Tensor:
            return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

        qh, kh, vh = split(self.q(q)), split(self.k(k)), split(self.v(v))
        att = torch.softmax(qh @ kh.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1)
        o = (att @ vh).transpose(1, 2)
        return self.out(o.reshape(o.shape[0], o.shape[1], -1))


class _Feedforward(nn.Module):
    def __init__(self, weights: dict[str, np.ndarray], p: str, activation: str) -> None:
        super().__init__()
        self.linear1, self.linear2 = _linear(weights, f"{p}.linear1"), _linear(weights, f"{p}.linear2")
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU(), "glu": nn.GLU()}[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.act(self.linear1(x)))


class _EncoderLayer(nn.Module):
    def __init__(self, weights: dict[str, np.ndarray], p: str, s: ActShape) -> None:
        super().__init__()
        self.attn, self.ff = _Attention(weights, f"{p}.self_attn", s.n_heads), _Feedforward(weights, p, s.activation)
        self.norm1, self.norm2, self.pre = _norm(weights, f"{p}.norm1"), _norm(weights, f"{p}.norm2"), s.pre_norm

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        h = self.norm1(x) if self.pre else x
        x = x + self.attn(h + pos, h + pos, h)
        x = x if self.pre else self.norm1(x)
        x = x + self.ff(self.norm2(x) if self.pre else x)
        return x if self.pre else self.norm2(x)


class _DecoderLayer(nn.Module):
    def __init__(self, weights: dict[str, np.ndarray], p: str, s: ActShape) -> None:
        super().__init__()
        self.self_attn = _Attention(weights, f"{p}.self_attn", s.n_heads)
        self.cross_attn = _Attention(weights, f"{p}.multihead_attn", s.n_heads)
        self.ff = _Feedforward(weights, p, s.activation)
        self.norms = nn.ModuleList([_norm(weights, f"{p}.norm{i}") for i in (1, 2, 3)])
        self.pre = s.pre_norm

    def forward(self, x: Tensor, memory: Tensor, pos: Tensor, memory_pos: Tensor) -> Tensor:
        n1, n2, n3 = self.norms
        h = n1(x) if self.pre else x
        x = x + self.self_attn(h + pos, h + pos, h)
        x = x if self.pre else n1(x)
        h = n2(x) if self.pre else x
        x = x + self.cross_attn(h + pos, memory + memory_pos, memory)
        x = x if self.pre else n2(x)
        x = x + self.ff(n3(x) if self.pre else x)
        return x if self.pre else n3(x)


def sinusoid_2d(dim_model: int, h: int, w: int) -> Tensor:
    """LeRobot's 2D sinusoidal embedding of a [h, w] feature map: [h*w, dim_model], y half then x half."""
    half, eps = dim_model // 2, 1e-6
    y = torch.arange(1, h + 1, dtype=torch.float32)[:, None].expand(h, w)
    x = torch.arange(1, w + 1, dtype=torch.float32)[None, :].expand(h, w)
    y = y / (h + eps) * (2 * math.pi)
    x = x / (w + eps) * (2 * math.pi)
    freq = 10000 ** (2 * (torch.arange(half, dtype=torch.float32) // 2) / half)

    def embed(r: Tensor) -> Tensor:
        a = r[..., None] / freq
        return torch.stack((a[..., 0::2].sin(), a[..., 1::2].cos()), dim=-1).flatten(2)

    return torch.cat((embed(y), embed(x)), dim=-1).reshape(h * w, dim_model)


class ActInference(nn.Module):
    """(camera images..., state[, environment state]), normalised -> action chunk [1, chunk_size, action_dim],
    normalised. Token order as LeRobot's: latent, state, environment state, then each camera's pixels."""

    def __init__(self, weights: dict[str, np.ndarray], s: ActShape, prefix: str = "model") -> None:
        super().__init__()
        if s.backbone not in RESNET_BLOCKS:
            raise ValueError(f"vision_backbone {s.backbone!r}: expected one of {sorted(RESNET_BLOCKS)}")
        p = prefix
        self.shape = s
        self.backbone = _Backbone(weights, f"{p}.backbone", RESNET_BLOCKS[s.backbone])
        proj = weights[f"{p}.encoder_img_feat_input_proj.weight"]
        self.img_proj = nn.Conv2d(proj.shape[1], proj.shape[0], 1)
        self.img_proj.weight.data = torch.from_numpy(proj)
        self.img_proj.bias.data = torch.from_numpy(weights[f"{p}.encoder_img_feat_input_proj.bias"])
        self.state_proj = _linear(weights, f"{p}.encoder_robot_state_input_proj")
        self.env_proj = _linear(weights, f"{p}.encoder_env_state_input_proj") if s.env_dim else None
        # The latent is zero at inference: its token is the projection's bias.
        self.register_buffer("latent_token", torch.from_numpy(weights[f"{p}.encoder_latent_input_proj.bias"])[None, None])
        self.register_buffer("pos_1d", torch.from_numpy(weights[f"{p}.encoder_1d_feature_pos_embed.weight"])[None])
        fh, fw = (math.ceil(v / 32) for v in s.image_hw)  # ResNet's stride 32 (7x7/2 conv, 3x3/2 pool, 3 x /2)
        self.register_buffer("pos_cam", sinusoid_2d(s.dim_model, fh, fw)[None])
        self.encoder = nn.ModuleList([_EncoderLayer(weights, f"{p}.encoder.layers.{i}", s)
                                      for i in range(s.n_encoder_layers)])
        self.enc_norm = _norm(weights, f"{p}.encoder.norm") if s.pre_norm else nn.Identity()
        self.decoder = nn.ModuleList([_DecoderLayer(weights, f"{p}.decoder.layers.{i}", s)
                                      for i in range(s.n_decoder_layers)])
        self.dec_norm = _norm(weights, f"{p}.decoder.norm")
        self.register_buffer("query_pos", torch.from_numpy(weights[f"{p}.decoder_pos_embed.weight"])[None])
        self.head = _linear(weights, f"{p}.action_head")

    def forward(self, *inputs: Tensor) -> Tensor:
        images, state = inputs[:self.shape.cameras], inputs[self.shape.cameras]
        tokens = [self.latent_token, self.state_proj(state)[:, None]]
        if self.env_proj is not None:
            tokens.append(self.env_proj(inputs[self.shape.cameras + 1])[:, None])
        # The cameras share the backbone: one batched pass (MNN would otherwise store its weights per camera).
        f = self.img_proj(self.backbone(torch.cat(images, dim=0)))  # [cameras, D, h, w]
        tokens.append(f.flatten(2).transpose(1, 2).reshape(1, -1, f.shape[1]))  # camera by camera, row-major
        x = torch.cat(tokens, dim=1)
        memory_pos = torch.cat([self.pos_1d] + [self.pos_cam] * len(images), dim=1)
        for layer in self.encoder:
            x = layer(x, memory_pos)
        memory = self.enc_norm(x)
        y = torch.zeros_like(self.query_pos)
        for layer in self.decoder:
            y = layer(y, memory, self.query_pos, memory_pos)
        return self.head(self.dec_norm(y))
