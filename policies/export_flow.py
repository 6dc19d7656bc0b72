"""The flow head's N-step Euler sampler refolded for export: same weights, same function, fewer ops.

Why: at batch 1 the exported flow head is bound by its op count, not its FLOPs (results/runtime_limits/):
XNNPACK ran 2,049 nodes at ~3 us each for 135 MFLOP. Every fold below is exact algebra on the trained
weights, so nothing is retrained and parity against the training model (FlowHead) still holds:

- q/k/v of self-attention fused into one Linear; the attention scale folded into W_q, b_q;
- tokens kept 2-D ([H, W]) at batch 1, so no reshape round trips around each Linear;
- RMSNorm gains folded into the columns of the Linear that follows each norm, its eps into the bias
  of the mean-square Linear, the Euler step dt into action_out; GELU (tanh form) written as
  u * sigmoid(2z), which is the same function in one op fewer;
- the time path precomputed: with a binary prefix mask a row's flow time is 1 (pinned) or i*dt, so
  its sinusoid embedding through time_mlp1 is one constant per step, and action_in is composed into
  time_mlp1 (one 8 -> W matmul per step);
- cross-attention keys are computed once, already transposed.

The mask must be binary (the runtimes set the first d rows to 1, the rest to 0).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from omni_vla_policies.model import GELU_C, DecoderBlock, FlowHead

GRAPH = "flow_head.folded/1"


def _const(module: nn.Module, name: str, value: Tensor) -> Tensor:
    module.register_buffer(name, value.detach().clone().contiguous())
    return getattr(module, name)


class _FoldedBlock(nn.Module):
    """One DecoderBlock on [H, W] tokens with the norms' gains, scales and GELU's 0.5 in the weights."""

    def __init__(self, blk: DecoderBlock) -> None:
        super().__init__()
        sa, ca, mlp = blk.self_attn, blk.cross, blk.mlp
        self.heads, self.head_dim = sa.heads, sa.head_dim
        if not blk.n1.eps == blk.n2.eps == blk.n3.eps:
            raise ValueError("a decoder block's three RMSNorms must share eps to share the folded statistics")
        g1, g2, g3 = blk.n1.weight[None, :], blk.n2.weight[None, :], blk.n3.weight[None, :]
        _const(self, "avg", blk.n1.avg)
        _const(self, "eps", torch.full((1,), blk.n1.eps))
        _const(self, "w_qkv", torch.cat([sa.q.weight * sa.scale, sa.k.weight, sa.v.weight]) * g1)
        _const(self, "b_qkv", torch.cat([sa.q.bias * sa.scale, sa.k.bias, sa.v.bias]))
        _const(self, "w_o", sa.out.weight)
        _const(self, "b_o", sa.out.bias)
        _const(self, "w_cq", ca.q.weight * ca.scale * g2)
        _const(self, "b_cq", ca.q.bias * ca.scale)
        _const(self, "w_ck", ca.k.weight)
        _const(self, "b_ck", ca.k.bias)
        _const(self, "w_cv", ca.v.weight)
        _const(self, "b_cv", ca.v.bias)
        _const(self, "w_co", ca.out.weight)
        _const(self, "b_co", ca.out.bias)
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

    def context_kv(self, ctx: Tensor) -> tuple[Tensor, Tensor]:
        """ctx [L, W] -> keys transposed [heads, hd, L] and values [heads, L, hd], once per inference."""
        k_t = F.linear(ctx, self.w_ck, self.b_ck).reshape(ctx.shape[0], self.heads, self.head_dim).permute(1, 2, 0)
        return k_t, self._heads(F.linear(ctx, self.w_cv, self.b_cv))

    def forward(self, h: Tensor, k_t: Tensor, cv: Tensor) -> Tensor:
        n, w, nh = h.shape[0], h.shape[1], self.heads
        qkv = F.linear(self.rms(h), self.w_qkv, self.b_qkv).reshape(n, 3 * nh, self.head_dim).permute(1, 0, 2)
        q, k, v = qkv[:nh], qkv[nh:2 * nh], qkv[2 * nh:]
        o = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1), v)
        h = h + F.linear(o.permute(1, 0, 2).reshape(n, w), self.w_o, self.b_o)
        q = self._heads(F.linear(self.rms(h), self.w_cq, self.b_cq))
        o = torch.bmm(torch.softmax(torch.bmm(q, k_t), dim=-1), cv)
        h = h + F.linear(o.permute(1, 0, 2).reshape(n, w), self.w_co, self.b_co)
        u = F.linear(self.rms(h), self.w_f1, self.b_f1)
        gelu = torch.sigmoid(u * ((u * u) * (2.0 * GELU_C * 0.044715) + 2.0 * GELU_C)) * u  # 1 + tanh(z) = 2 sigmoid(2z)
        return h + F.linear(gelu, self.w_f2, self.b_f2)


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
        for i in range(n):  # one constant per step (indexing a stacked tensor exports a non-delegated select)
            _const(self, f"t_step{i}", time_term(i / n))
        _const(self, "w_t2", head.time_mlp2.weight)
        _const(self, "b_t2", head.time_mlp2.bias)
        _const(self, "pos", head.pos)
        self.blocks = nn.ModuleList(_FoldedBlock(b) for b in head.blocks)
        _const(self, "avg", head.out_norm.avg)
        _const(self, "out_eps", torch.full((1,), head.out_norm.eps))
        dt = 1.0 / n
        _const(self, "w_out", head.action_out.weight * head.out_norm.weight[None, :] * dt)
        _const(self, "b_out", head.action_out.bias * dt)

    def forward(self, context: Tensor, state: Tensor, noise: Tensor, prefix: Tensor, prefix_mask: Tensor) -> Tensor:
        h_, d = self.horizon, prefix.shape[-1]
        ctx = context.reshape(context.shape[1], context.shape[2])
        mask = prefix_mask.reshape(h_, 1)
        keep = 1.0 - mask
        offset = state.reshape(1, d) + self.action_mean if self.delta else self.action_mean
        pinned = mask * ((prefix.reshape(h_, d) - offset) / self.action_std)
        x = pinned + keep * noise.reshape(h_, d)
        kv = [blk.context_kv(ctx) for blk in self.blocks]
        time_pinned = mask * self.t_pinned
        for i in range(self.num_steps):
            u = F.linear(x, self.w_in) + (time_pinned + keep * getattr(self, f"t_step{i}"))
            h = F.linear(u * torch.sigmoid(u), self.w_t2, self.b_t2) + self.pos
            for blk, (k_t, cv) in zip(self.blocks, kv):
                h = blk(h, k_t, cv)
            h = h / torch.sqrt(F.linear(h * h, self.avg, self.out_eps))  # out_norm; its gain is in w_out
            x = x + keep * F.linear(h, self.w_out, self.b_out)  # pinned rows: + 0, they stay as set
        raw = x * self.action_std + offset
        return (mask * prefix.reshape(h_, d) + keep * raw).reshape(1, h_, d)


def folded(head: FlowHead) -> FoldedFlowHead:
    """The export form of `head` (eval mode, no gradients)."""
    with torch.no_grad():
        return FoldedFlowHead(head).eval()

