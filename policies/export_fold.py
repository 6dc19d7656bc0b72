"""Both exported stages refolded for export: same weights, same function, fewer ops.

Why: at batch 1 the exported graphs are bound by their op count, not their FLOPs (results/runtime_limits/):
XNNPACK ran 2,049 flow-head nodes at ~3 us each for 135 MFLOP. Every fold below is exact algebra on the
trained weights, so nothing is retrained and parity against the training model still holds.

Both stages (transformer blocks):
- q/k/v of self-attention fused into one Linear; the attention scale folded into W_q, b_q;
- tokens kept 2-D ([tokens, W]) at batch 1, so no reshape round trips around each Linear;
- RMSNorm gains folded into the columns of the Linear that follows each norm, its eps into the bias
  of the mean-square Linear; GELU (tanh form) written as u * sigmoid(2z), the same function in fewer ops.

Flow head (FoldedFlowHead):
- the Euler step dt folded into action_out;
- the time path precomputed: with a binary prefix mask a row's flow time is 1 (pinned) or i*dt, so
  its sinusoid embedding through time_mlp1 is one constant per step, and action_in is composed into
  time_mlp1 (one 8 -> W matmul per step);
- cross-attention keys are computed once, already transposed. The mask must be binary (the runtimes
  set the first d rows to 1, the rest to 0);
- exported as three programs, init -> N x step -> finish, that the runtime chains (omni_vla/runtime/flow.py).
  Unrolled in one graph, every Euler step got its own packed copy of the shared weights (XNNPACK; 15 MB
  streamed per inference instead of 1.5 MB that stay in L2) and MNN kept them as runtime-operand MatMuls
  instead of prepacked convolutions; one step program measured 1.2-1.4x faster on both.

Prefix (FoldedPrefix):
- pixel normalisation folded into the first convolution, whose zero padding becomes padding with the
  pixel mean (what zero means after normalisation); the keypoint gain folded into the keypoint maps;
- the convolutions' GELU in the sigmoid form; both cameras' position embeddings added in one op;
- state normalisation folded into the state Linear, the token-type embeddings into the biases.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from omni_vla_policies.model import GELU_C, DecoderBlock, EncoderBlock, FlowHead, PrefixEncoder

GRAPH = "flow_head.stepped/1"
PREFIX_GRAPH = "prefix.folded/1"


def _const(module: nn.Module, name: str, value: Tensor) -> Tensor:
    module.register_buffer(name, value.detach().clone().contiguous())
    return getattr(module, name)


def gelu(u: Tensor) -> Tensor:
    """tanh-GELU in one op fewer: 0.5 * (1 + tanh(z)) = sigmoid(2z)."""
    return torch.sigmoid(u * ((u * u) * (2.0 * GELU_C * 0.044715) + 2.0 * GELU_C)) * u


class _FoldedCore(nn.Module):
    """Self-attention and MLP of a transformer block on [n, W] tokens, norm gains and scales in the weights."""

    def _fold_core(self, sa: nn.Module, mlp: nn.Module, norms: tuple[nn.Module, ...]) -> None:
        """`norms`: the block's RMSNorms in order; the first precedes self-attention, the last the MLP."""
        self.heads, self.head_dim = sa.heads, sa.head_dim
        if len({n.eps for n in norms}) != 1:
            raise ValueError("a block's RMSNorms must share eps to share the folded statistics")
        n1 = norms[0]
        g1, g3 = n1.weight[None, :], norms[-1].weight[None, :]
        _const(self, "avg", n1.avg)
        _const(self, "eps", torch.full((1,), n1.eps))
        _const(self, "w_qkv", torch.cat([sa.q.weight * sa.scale, sa.k.weight, sa.v.weight]) * g1)
        _const(self, "b_qkv", torch.cat([sa.q.bias * sa.scale, sa.k.bias, sa.v.bias]))
        _const(self, "w_o", sa.out.weight)
        _const(self, "b_o", sa.out.bias)
        _const(self, "w_f1", mlp.fc1.weight * g3)
        _const(self, "b_f1", mlp.fc1.bias)
        _const(self, "w_f2", mlp.fc2.weight)
        _const(self, "b_f2", mlp.fc2.bias)

    def rms(self, x: Tensor) -> Tensor:
        """RMSNorm without its gain (folded into the next Linear)."""
        return x / torch.sqrt(F.linear(x * x, self.avg, self.eps))  # ONNX has no Rsqrt: x * rsqrt is 3 nodes there

    def _heads(self, x: Tensor) -> Tensor:
        """[n, W] -> [heads, n, W/heads]."""
        return x.reshape(x.shape[0], self.heads, self.head_dim).permute(1, 0, 2)

    def self_attention(self, h: Tensor) -> Tensor:
        n, w, nh = h.shape[0], h.shape[1], self.heads
        qkv = F.linear(self.rms(h), self.w_qkv, self.b_qkv).reshape(n, 3 * nh, self.head_dim).permute(1, 0, 2)
        q, k, v = qkv[:nh], qkv[nh:2 * nh], qkv[2 * nh:]
        o = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1), v)
        return h + F.linear(o.permute(1, 0, 2).reshape(n, w), self.w_o, self.b_o)

    def mlp(self, h: Tensor) -> Tensor:
        return h + F.linear(gelu(F.linear(self.rms(h), self.w_f1, self.b_f1)), self.w_f2, self.b_f2)


class _FoldedEncoderBlock(_FoldedCore):
    def __init__(self, blk: EncoderBlock) -> None:
        super().__init__()
        self._fold_core(blk.attn, blk.mlp, (blk.n1, blk.n2))

    def forward(self, h: Tensor) -> Tensor:
        return self.mlp(self.self_attention(h))


class _FoldedDecoderBlock(_FoldedCore):
    """One DecoderBlock: the core plus cross-attention to the fixed context."""

    def __init__(self, blk: DecoderBlock) -> None:
        super().__init__()
        self._fold_core(blk.self_attn, blk.mlp, (blk.n1, blk.n2, blk.n3))
        ca = blk.cross
        _const(self, "w_cq", ca.q.weight * ca.scale * blk.n2.weight[None, :])
        _const(self, "b_cq", ca.q.bias * ca.scale)
        _const(self, "w_ck", ca.k.weight)
        _const(self, "b_ck", ca.k.bias)
        _const(self, "w_cv", ca.v.weight)
        _const(self, "b_cv", ca.v.bias)
        _const(self, "w_co", ca.out.weight)
        _const(self, "b_co", ca.out.bias)

    def context_kv(self, ctx: Tensor) -> tuple[Tensor, Tensor]:
        """ctx [L, W] -> keys transposed [heads, hd, L] and values [heads, L, hd], once per inference."""
        k_t = F.linear(ctx, self.w_ck, self.b_ck).reshape(ctx.shape[0], self.heads, self.head_dim).permute(1, 2, 0)
        return k_t, self._heads(F.linear(ctx, self.w_cv, self.b_cv))

    def forward(self, h: Tensor, k_t: Tensor, cv: Tensor) -> Tensor:
        h = self.self_attention(h)
        n, w = h.shape
        q = self._heads(F.linear(self.rms(h), self.w_cq, self.b_cq))
        o = torch.bmm(torch.softmax(torch.bmm(q, k_t), dim=-1), cv)
        return self.mlp(h + F.linear(o.permute(1, 0, 2).reshape(n, w), self.w_co, self.b_co))


class FoldedFlowHead(nn.Module):
    """Batch-1 export form of FlowHead.forward (same signature and shapes, raw values in and out)."""

    def __init__(self, head: FlowHead) -> None:
        super().__init__()
        cfg = head.cfg
        self.delta = cfg.action_mode == "delta"
        self.horizon, self.num_steps = cfg.horizon, cfg.num_steps
        w, n = cfg.width, cfg.num_steps
        _const(self, "action_mean", head.norm.action_mean)
        _const(self, "action_std", head.norm.action_std)
        w1_act, w1_time = head.time_mlp1.weight[:, :w], head.time_mlp1.weight[:, w:]
        _const(self, "w_in", w1_act @ head.action_in.weight)
        base = w1_act @ head.action_in.bias + head.time_mlp1.bias

        def time_term(t: float) -> Tensor:
            ang = t * head.freqs
            return w1_time @ torch.cat([torch.sin(ang), torch.cos(ang)]) + base

        _const(self, "t_pinned", time_term(1.0))
        _const(self, "t_steps", torch.stack([time_term(i / n) for i in range(n)]))
        _const(self, "one_hot", torch.eye(n))
        _const(self, "w_t2", head.time_mlp2.weight)
        _const(self, "b_t2", head.time_mlp2.bias)
        _const(self, "pos", head.pos)
        self.blocks = nn.ModuleList(_FoldedDecoderBlock(b) for b in head.blocks)
        _const(self, "avg", head.out_norm.avg)
        _const(self, "out_eps", torch.full((1,), head.out_norm.eps))
        dt = 1.0 / n
        _const(self, "w_out", head.action_out.weight * head.out_norm.weight[None, :] * dt)
        _const(self, "b_out", head.action_out.bias * dt)

    def _offset(self, state: Tensor) -> Tensor:
        return state.reshape(1, -1) + self.action_mean if self.delta else self.action_mean

    def init(self, context: Tensor, state: Tensor, noise: Tensor, prefix: Tensor, prefix_mask: Tensor) -> list[Tensor]:
        """Once per inference: the start point x [H,D] (pinned rows set, the rest noise) and each block's context k/v."""
        h_, d = self.horizon, prefix.shape[-1]
        ctx = context.reshape(context.shape[1], context.shape[2])
        mask = prefix_mask.reshape(h_, 1)
        pinned = mask * ((prefix.reshape(h_, d) - self._offset(state)) / self.action_std)
        x = pinned + (1.0 - mask) * noise.reshape(h_, d)
        return [x] + [t for blk in self.blocks for t in blk.context_kv(ctx)]

    def step(self, x: Tensor, prefix_mask: Tensor, step: Tensor, *kv: Tensor) -> Tensor:
        """One Euler step; `step` is the one-hot [1,N] step index (it selects the step's time constant exactly)."""
        mask = prefix_mask.reshape(self.horizon, 1)
        keep = 1.0 - mask
        u = F.linear(x, self.w_in) + (mask * self.t_pinned + keep * (step @ self.t_steps))
        h = F.linear(u * torch.sigmoid(u), self.w_t2, self.b_t2) + self.pos
        for i, blk in enumerate(self.blocks):
            h = blk(h, kv[2 * i], kv[2 * i + 1])
        h = h / torch.sqrt(F.linear(h * h, self.avg, self.out_eps))  # out_norm; its gain is in w_out
        return x + keep * F.linear(h, self.w_out, self.b_out)  # pinned rows: + 0, they stay as set

    def finish(self, x: Tensor, state: Tensor, prefix: Tensor, prefix_mask: Tensor) -> Tensor:
        """Back to raw joint targets; the pinned rows are the given prefix itself."""
        h_, d = self.horizon, prefix.shape[-1]
        mask = prefix_mask.reshape(h_, 1)
        raw = x * self.action_std + self._offset(state)
        return (mask * prefix.reshape(h_, d) + (1.0 - mask) * raw).reshape(1, h_, d)

    def forward(self, context: Tensor, state: Tensor, noise: Tensor, prefix: Tensor, prefix_mask: Tensor) -> Tensor:
        """init -> N steps -> finish: the same function FlowHead.forward computes."""
        x, *kv = self.init(context, state, noise, prefix, prefix_mask)
        for i in range(self.num_steps):
            x = self.step(x, prefix_mask, self.one_hot[i : i + 1], *kv)
        return self.finish(x, state, prefix, prefix_mask)


class FoldedPrefix(nn.Module):
    """Batch-1 export form of PrefixEncoder.forward (same signature and shapes, raw values in and out)."""

    def __init__(self, enc: PrefixEncoder) -> None:
        super().__init__()
        vis = enc.vision
        mean, std = vis.pix_mean.flatten(), vis.pix_std.flatten()
        if not torch.all(mean == mean[0]):
            raise ValueError(f"pixel means {mean.tolist()} differ per channel: the fold pads with one value")
        self.pad_value = float(mean[0])
        first = vis.convs[0]
        self.pad = int(first.padding[0])
        w0 = first.weight / std.view(1, -1, 1, 1)
        _const(self, "w_conv0", w0)
        _const(self, "b_conv0", first.bias - (w0 * mean.view(1, -1, 1, 1)).sum(dim=(1, 2, 3)))
        self.strides = [int(c.stride[0]) for c in vis.convs]
        self.paddings = [0] + [int(c.padding[0]) for c in vis.convs[1:]]
        for i, c in enumerate(vis.convs[1:], start=1):
            _const(self, f"w_conv{i}", c.weight)
            _const(self, f"b_conv{i}", c.bias)
        self.kp_at = vis.kp_at if vis.keypoints is not None else -1
        if vis.keypoints is not None:
            kp = vis.keypoints
            self.k, self.n = kp.k, kp.n
            _const(self, "w_maps", kp.maps.weight * kp.GAIN)
            _const(self, "b_maps", kp.maps.bias * kp.GAIN)
            _const(self, "coords", kp.coords)
            _const(self, "w_kp", kp.proj.weight)
            _const(self, "b_kp", kp.proj.bias)
        _const(self, "w_proj", vis.proj.weight)
        _const(self, "b_proj", vis.proj.bias)
        self.proj_stride, self.proj_pad = int(vis.proj.stride[0]), int(vis.proj.padding[0])
        _const(self, "pos", torch.stack([vis.pos_front, vis.pos_wrist]))
        _const(self, "w_lang", enc.lang.weight)
        _const(self, "b_lang", enc.lang.bias + enc.lang_type.flatten())
        s_std, s_mean = enc.norm.state_std, enc.norm.state_mean
        _const(self, "w_state", enc.state.weight / s_std[None, :])
        _const(self, "b_state", enc.state.bias - enc.state.weight @ (s_mean / s_std) + enc.state_type.flatten())
        self.blocks = nn.ModuleList(_FoldedEncoderBlock(b) for b in enc.blocks)
        _const(self, "avg", enc.out_norm.avg)
        _const(self, "out_eps", torch.full((1,), enc.out_norm.eps))
        _const(self, "out_gain", enc.out_norm.weight)

    def forward(self, front: Tensor, wrist: Tensor, state: Tensor, instruction: Tensor) -> Tensor:
        x = torch.cat([front, wrist], dim=0)
        if self.pad:
            x = F.pad(x, (self.pad,) * 4, value=self.pad_value)  # normalised zero padding, in raw pixels
        kp = None
        for i, (stride, pad) in enumerate(zip(self.strides, self.paddings)):
            x = gelu(F.conv2d(x, getattr(self, f"w_conv{i}"), getattr(self, f"b_conv{i}"), stride=stride, padding=pad))
            if i == self.kp_at:
                attn = torch.softmax(F.conv2d(x, self.w_maps, self.b_maps).reshape(2 * self.k, self.n), dim=-1)
                kp = F.linear(F.linear(attn, self.coords).reshape(2, 2 * self.k), self.w_kp, self.b_kp).reshape(2, 1, -1)
        x = F.conv2d(x, self.w_proj, self.b_proj, stride=self.proj_stride, padding=self.proj_pad)
        x = x.flatten(2).transpose(1, 2)
        if kp is not None:
            x = torch.cat([x, kp], dim=1)
        w = x.shape[2]
        tokens = [(x + self.pos).reshape(-1, w), F.linear(instruction, self.w_lang, self.b_lang),
                  F.linear(state, self.w_state, self.b_state)]
        h = torch.cat(tokens, dim=0)
        for blk in self.blocks:
            h = blk(h)
        h = h / torch.sqrt(F.linear(h * h, self.avg, self.out_eps)) * self.out_gain
        return h.reshape(1, h.shape[0], w)


def folded(head: FlowHead) -> FoldedFlowHead:
    """The export form of `head` (eval mode, no gradients)."""
    with torch.no_grad():
        return FoldedFlowHead(head).eval()



def folded_prefix(enc: PrefixEncoder) -> FoldedPrefix:
    """The export form of `enc` (eval mode, no gradients)."""
    with torch.no_grad():
        return FoldedPrefix(enc).eval()
