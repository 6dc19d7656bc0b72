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
import torch.nn.functional as F
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

    def trunk(self, images: Tensor) -> Tensor:
        """[cameras, 3, H, W] -> [cameras, D, h, w]: the cameras share the backbone, one batched pass (MNN would
        otherwise store its weights per camera)."""
        return self.img_proj(self.backbone(images))

    def head_from_features(self, f: Tensor, state: Tensor, *env: Tensor) -> Tensor:
        """The trunk's features and the state (and environment state) -> action chunk."""
        tokens = [self.latent_token, self.state_proj(state)[:, None]]
        if self.env_proj is not None:
            tokens.append(self.env_proj(env[0])[:, None])
        tokens.append(f.flatten(2).transpose(1, 2).reshape(1, -1, f.shape[1]))  # camera by camera, row-major
        x = torch.cat(tokens, dim=1)
        memory_pos = torch.cat([self.pos_1d] + [self.pos_cam] * f.shape[0], dim=1)
        for layer in self.encoder:
            x = layer(x, memory_pos)
        memory = self.enc_norm(x)
        y = torch.zeros_like(self.query_pos)
        for layer in self.decoder:
            y = layer(y, memory, self.query_pos, memory_pos)
        return self.head(self.dec_norm(y))

    def forward(self, *inputs: Tensor) -> Tensor:
        c = self.shape.cameras
        return self.head_from_features(self.trunk(torch.cat(inputs[:c], dim=0)), *inputs[c:])


# --- The export form: the same function, as a graph every runtime takes whole ---------------------------------------
# Measured on the reference form (results/lerobot_act/README.md): ExecuTorch ran 12 LayerNorms on
# portable kernels (XNNPACK has no LayerNorm) which cut the graph into 22 XNNPACK partitions with 24 portable
# expand_copy ops (4-D attention matmuls) between them. The export form below is exact algebra on the same weights:
# - tokens 2-D ([tokens, D], batch 1) and attention as 3-D bmm over heads: no 4-D broadcast matmuls;
# - q, k, v of self-attention one Linear on the layer input; the positional embeddings' projections (constant,
#   per token) and the attention scale folded into a per-token bias;
# - cross-attention keys and values one Linear on the memory with the memory position projections folded likewise;
# - the first decoder layer's input is zero, so its self-attention block and its cross-attention queries are
#   constants, computed here once;
# - LayerNorm either native (ONNX LayerNormalization: onnxruntime and MNN fuse it) or spelled out in ops XNNPACK
#   delegates (means as a Linear with a 1/D row, x / sqrt(var + eps)); the last norm's gain and bias are folded
#   into the action head;
# - for XNNPACK, the stride-1 3x3 convolutions of the last ResNet stage (2x2 maps at 64x64 images: 8-row GEMMs over
#   9.4 MB of weights each) as one batched matmul with the weights as its rows: W [out, 9C] @ patches [9C, pixels].
#   XNNPACK's GEMM tiles the pixel rows by 7, so with 8 pixel rows (two cameras x 4) it streamed the weights twice;
#   with the weights as rows they are streamed once. The stage runs channel-major ([C, cameras, h, w]) so the
#   patches are 9 slices of the zero-padded map, no transposes.


def _layer_norm(x: Tensor, norm: nn.LayerNorm, avg: Tensor, native: bool) -> Tensor:
    if native:
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    c = x - F.linear(x, avg)
    return c / torch.sqrt(F.linear(c * c, avg) + norm.eps) * norm.weight + norm.bias


def _plain_layer_norm(x: Tensor, avg: Tensor, eps: float, native: bool) -> Tensor:
    """LayerNorm without its affine part (folded into the Linear after it)."""
    if native:
        return F.layer_norm(x, (x.shape[-1],), None, None, eps)
    c = x - F.linear(x, avg)
    return c / torch.sqrt(F.linear(c * c, avg) + eps)


class _FoldedAttention(nn.Module):
    """Attention on 2-D tokens whose query/key inputs are (x + a constant per-token position)."""

    def __init__(self, att: _Attention) -> None:
        super().__init__()
        self.heads, self.head_dim = att.heads, att.head_dim
        self.scale = 1.0 / math.sqrt(att.head_dim)
        self.w_o, self.b_o = nn.Parameter(att.out.weight.detach().clone()), nn.Parameter(att.out.bias.detach().clone())

    def split(self, x: Tensor) -> Tensor:
        """[n, H*hd] -> [H, n, hd]."""
        return x.reshape(x.shape[0], self.heads, self.head_dim).permute(1, 0, 2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [H, n, hd] (scaled), k [H, m, hd], v [H, m, hd] -> [n, D] after the output projection."""
        o = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1), v)
        return F.linear(o.permute(1, 0, 2).reshape(q.shape[1], -1), self.w_o, self.b_o)


class _FoldedSelfAttention(_FoldedAttention):
    def __init__(self, att: _Attention, pos: Tensor) -> None:
        """pos [n, D]: the positions added to the query and key inputs (never to the values)."""
        super().__init__(att)
        s = self.scale
        w = torch.cat([att.q.weight * s, att.k.weight, att.v.weight])
        bias = torch.cat([F.linear(pos, att.q.weight, att.q.bias) * s, F.linear(pos, att.k.weight, att.k.bias),
                          att.v.bias.expand(pos.shape[0], -1)], dim=1)
        self.register_buffer("w_qkv", w.detach().clone())
        self.register_buffer("b_qkv", bias.detach().clone().contiguous())

    def forward(self, h: Tensor) -> Tensor:
        n, nh = h.shape[0], self.heads
        qkv = (F.linear(h, self.w_qkv) + self.b_qkv).reshape(n, 3 * nh, self.head_dim).permute(1, 0, 2)
        return self.attend(qkv[:nh], qkv[nh:2 * nh], qkv[2 * nh:])


class _FoldedEncoderLayer(nn.Module):
    def __init__(self, layer: _EncoderLayer, pos: Tensor) -> None:
        super().__init__()
        self.attn, self.pre = _FoldedSelfAttention(layer.attn, pos), layer.pre
        self.ff, self.norm1, self.norm2 = layer.ff, layer.norm1, layer.norm2

    def forward(self, x: Tensor, avg: Tensor, native: bool) -> Tensor:
        def ln(t: Tensor, norm: nn.LayerNorm) -> Tensor:
            return _layer_norm(t, norm, avg, native)

        x = x + self.attn(ln(x, self.norm1) if self.pre else x)
        x = x if self.pre else ln(x, self.norm1)
        x = x + self.ff(ln(x, self.norm2) if self.pre else x)
        return x if self.pre else ln(x, self.norm2)


class _FoldedDecoderLayer(nn.Module):
    """A decoder layer whose cross-attention keys/values come from the memory with its positions folded in.
    `first`: the layer's input is the zero query, so everything before the cross-attention is a constant."""

    def __init__(self, layer: _DecoderLayer, query_pos: Tensor, memory_pos: Tensor, first: bool) -> None:
        super().__init__()
        ca = layer.cross_attn
        self.pre, self.first, self.norms, self.ff = layer.pre, first, layer.norms, layer.ff
        self.cross = _FoldedAttention(ca)
        s = self.cross.scale
        self.register_buffer("w_kv", torch.cat([ca.k.weight, ca.v.weight]).detach().clone())
        self.register_buffer("b_kv", torch.cat([F.linear(memory_pos, ca.k.weight, ca.k.bias),
                                                ca.v.bias.expand(memory_pos.shape[0], -1)], dim=1).detach().clone())
        n1, n2, _ = layer.norms
        if first:
            y = torch.zeros_like(query_pos)
            h = n1(y) if self.pre else y
            x = y + layer.self_attn((h + query_pos)[None], (h + query_pos)[None], h[None])[0]
            x = x if self.pre else n1(x)
            hq = n2(x) if self.pre else x
            self.register_buffer("x0", x.detach().clone())
            self.register_buffer("q0", self.cross.split(ca.q(hq + query_pos) * s).detach().clone().contiguous())
        else:
            self.self_attn = _FoldedSelfAttention(layer.self_attn, query_pos)
            self.register_buffer("w_q", (ca.q.weight * s).detach().clone())
            self.register_buffer("b_q", (F.linear(query_pos, ca.q.weight, ca.q.bias) * s).detach().clone())

    def forward(self, x: Tensor | None, memory: Tensor, avg: Tensor, native: bool) -> Tensor:
        """x: the previous layer's output; None for the first layer (its input is the zero query)."""
        def ln(t: Tensor, norm: nn.LayerNorm) -> Tensor:
            return _layer_norm(t, norm, avg, native)

        n1, n2, n3 = self.norms
        if self.first or x is None:
            x, q = self.x0, self.q0
        else:
            x = x + self.self_attn(ln(x, n1) if self.pre else x)
            x = x if self.pre else ln(x, n1)
            q = self.cross.split(F.linear(ln(x, n2) if self.pre else x, self.w_q) + self.b_q)
        kv = (F.linear(memory, self.w_kv) + self.b_kv).reshape(memory.shape[0], 2 * self.cross.heads, -1).permute(1, 0, 2)
        x = x + self.cross.attend(q, kv[:self.cross.heads], kv[self.cross.heads:])
        x = x if self.pre else ln(x, n2)
        x = x + self.ff(ln(x, n3) if self.pre else x)
        return x if self.pre else ln(x, n3)


class _RowsConv3x3(nn.Module):
    """A 3x3 stride-1 pad-1 convolution on a channel-major map [C, B, h, w] -> [out, B, h, w]."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        w = conv.weight.detach()
        self.register_buffer("w", w.reshape(1, w.shape[0], -1).clone())  # [1, out, C*9]: (c, dy, dx) order
        self.register_buffer("b", conv.bias.detach().reshape(1, -1, 1).clone())

    def forward(self, x: Tensor) -> Tensor:
        c, b, h, w = x.shape
        xp = F.pad(x, (1, 1, 1, 1))
        taps = [xp[:, :, dy:dy + h, dx:dx + w].reshape(c, 1, b * h * w) for dy in range(3) for dx in range(3)]
        patches = torch.cat([torch.cat(taps[:5], dim=1), torch.cat(taps[5:], dim=1)], dim=1)  # XNNPACK: <= 5 inputs
        y = torch.bmm(self.w, patches.reshape(1, c * 9, b * h * w)) + self.b
        return y.reshape(-1, b, h, w)


class _RowsStage(nn.Module):
    """The last ResNet stage and the 1x1 input projection, its stride-1 3x3 convolutions as _RowsConv3x3:
    NCHW [B, C, H, W] in -> tokens [B*h*w, D] out (camera by camera, row-major)."""

    def __init__(self, blocks: list[_BasicBlock], proj: nn.Conv2d) -> None:
        super().__init__()
        first = blocks[0]
        if first.conv1.conv.stride == (1, 1) or first.down is None:
            raise ValueError("the last ResNet stage must open with a strided block")
        self.first = first
        self.rows = nn.ModuleList([_RowsConv3x3(first.conv2.conv)] + [
            m for blk in blocks[1:] for m in (_RowsConv3x3(blk.conv1.conv), _RowsConv3x3(blk.conv2.conv))])
        w = proj.weight.detach()
        self.register_buffer("w_proj", w.reshape(1, w.shape[0], w.shape[1]).clone())
        self.register_buffer("b_proj", proj.bias.detach().reshape(1, -1, 1).clone())

    def forward(self, x: Tensor) -> Tensor:
        f = self.first
        h = torch.relu(f.conv1(x)).permute(1, 0, 2, 3)  # channel-major from here on
        skip = f.down(x).permute(1, 0, 2, 3)
        x = torch.relu(self.rows[0](h) + skip)
        for i in range(1, len(self.rows), 2):
            x = torch.relu(self.rows[i + 1](torch.relu(self.rows[i](x))) + x)
        c, b, hh, ww = x.shape
        y = torch.bmm(self.w_proj, x.reshape(1, c, b * hh * ww)) + self.b_proj
        return y.reshape(y.shape[1], b * hh * ww).t()


class ActExportForm(nn.Module):
    """ActInference's function, written for the runtimes (same inputs, outputs and weights; see the notes above).
    `xnnpack`: the form for ExecuTorch (LayerNorm spelled out, last ResNet stage as weight-row matmuls); otherwise
    the form for ONNX (onnxruntime, MNN: native LayerNorm, convolutions)."""

    def __init__(self, model: ActInference, xnnpack: bool) -> None:
        super().__init__()
        s, self.native, self.shape = model.shape, not xnnpack, model.shape
        d = s.dim_model
        b, last = model.backbone, RESNET_BLOCKS[s.backbone][-1]
        self.stem, self.pool = b.stem, b.pool
        if xnnpack:  # the last stage's weights live in rows_stage only (an exporter stores every parameter it is given)
            self.early = nn.Sequential(*list(b.layers)[:-last])
            self.rows_stage = _RowsStage(list(b.layers)[-last:], model.img_proj)
        else:
            self.early, self.rows_stage = b.layers, None
            self.img_proj = model.img_proj
        memory_pos = torch.cat([model.pos_1d] + [model.pos_cam] * s.cameras, dim=1)[0]
        query_pos = model.query_pos[0]
        self.register_buffer("avg", torch.full((1, d), 1.0 / d))
        self.register_buffer("latent", model.latent_token[0].detach().clone())
        self.state_proj, self.env_proj = model.state_proj, model.env_proj
        self.encoder = nn.ModuleList(_FoldedEncoderLayer(layer, memory_pos) for layer in model.encoder)
        self.enc_norm = model.enc_norm if s.pre_norm else None
        self.decoder = nn.ModuleList(_FoldedDecoderLayer(layer, query_pos, memory_pos, i == 0)
                                     for i, layer in enumerate(model.decoder))
        dn, head = model.dec_norm, model.head
        self.dec_eps = dn.eps
        self.register_buffer("w_head", (head.weight * dn.weight[None, :]).detach().clone())
        self.register_buffer("b_head", (head.bias + head.weight @ dn.bias).detach().clone())

    def trunk(self, images: Tensor) -> Tensor:
        """[cameras, 3, H, W] -> image tokens [cameras*h*w, D], camera by camera, row-major."""
        x = self.early(self.pool(torch.relu(self.stem(images))))
        if self.rows_stage is not None:
            return self.rows_stage(x)
        f = self.img_proj(x)
        return f.flatten(2).permute(0, 2, 1).reshape(-1, f.shape[1])

    def head_from_features(self, image_tokens: Tensor, state: Tensor, *env: Tensor) -> Tensor:
        tokens = [self.latent, self.state_proj(state)]
        if self.env_proj is not None:
            tokens.append(self.env_proj(env[0]))
        x = torch.cat(tokens + [image_tokens], dim=0)
        for layer in self.encoder:
            x = layer(x, self.avg, self.native)
        memory = x if self.enc_norm is None else _layer_norm(x, self.enc_norm, self.avg, self.native)
        y = None
        for layer in self.decoder:
            y = layer(y, memory, self.avg, self.native)
        y = _plain_layer_norm(y, self.avg, self.dec_eps, self.native)
        return F.linear(y, self.w_head, self.b_head)[None]

    def forward(self, *inputs: Tensor) -> Tensor:
        c = self.shape.cameras
        return self.head_from_features(self.trunk(torch.cat(inputs[:c], dim=0)), *inputs[c:])


def act_export_form(model: ActInference, xnnpack: bool) -> ActExportForm:
    """The export form of `model` for ExecuTorch/XNNPACK (`xnnpack`) or for ONNX (eval mode, no gradients)."""
    with torch.no_grad():
        return ActExportForm(model, xnnpack).eval()
