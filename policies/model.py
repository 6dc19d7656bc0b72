"""Reference VLA: CNN vision tokens + instruction + state -> transformer context -> flow-matching action head.

Written only with ops that ExecuTorch/XNNPACK, ONNX and MNN all run identically (measured on the
exported bundles; `omni-vla parity`): tanh-GELU written out (ExecuTorch ignores approximate="tanh", MNN always uses tanh),
RMSNorm written out (XNNPACK does not take LayerNorm), attention as plain matmul + softmax (no SDPA,
whose masking emits ONNX IsNaN that MNN cannot convert), sinusoid frequencies as buffers, and the
Euler loop in Python (while_loop cannot be exported; the export runs one step program N times).

Flow convention (the issue's linear path): x_t = t * x1 + (1 - t) * x0 with x0 ~ N(0, I) noise at
t = 0 and data x1 at t = 1; the network predicts the velocity x1 - x0; inference integrates t: 0 -> 1
in N Euler steps. Real-time chunking by prefix conditioning: pinned rows are clean, have t = 1, and
are overwritten with the committed prefix after every Euler step, so they come out exactly.
"""
from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

GELU_C = math.sqrt(2.0 / math.pi)


class ModelConfig(BaseModel):
    """Architecture hyper-parameters; stored in the checkpoint so export rebuilds the same net."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action_dim: int = Field(8, ge=1)
    state_dim: int = Field(8, ge=1)
    horizon: int = Field(16, ge=1)
    num_steps: int = Field(10, ge=1)
    max_prefix: int = Field(6, ge=0)
    image_size: int = Field(64, ge=16)
    embedding_dim: int = 384
    width: int = 128
    heads: int = 4
    prefix_layers: int = 3
    head_layers: int = 3
    mlp_ratio: int = 4
    cnn_channels: tuple[int, ...] = (32, 64, 96)
    keypoints: int = Field(0, ge=0, description="spatial-softmax keypoints per camera (0: none), one extra token")
    aux_offsets: tuple[int, ...] = Field(
        (), description="training only: also regress the joint positions this many steps ahead (-1: episode end)")
    action_mode: Literal["delta", "absolute"] = "delta"  # delta: chunk relative to current joint positions

    def to_dict(self) -> dict:
        d = self.model_dump()
        d["cnn_channels"] = list(self.cnn_channels)
        d["aux_offsets"] = list(self.aux_offsets)
        if not d["aux_offsets"]:
            del d["aux_offsets"]  # checkpoints without the auxiliary head keep their exact config
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        return cls.model_validate(d)

    @property
    def tokens_per_camera(self) -> int:
        return (self.image_size // 2 ** (len(self.cnn_channels) + 1)) ** 2 + (1 if self.keypoints else 0)

    @property
    def context_len(self) -> int:
        return 2 * self.tokens_per_camera + 2  # two cameras + instruction + state


def gelu_tanh(x: Tensor) -> Tensor:
    """tanh-approximate GELU. Exported graphs get it written out, so every runtime computes the same
    function; eager training uses torch's fused kernel of the same formula (~1.5x faster steps)."""
    if torch.compiler.is_exporting() or torch.jit.is_tracing():
        return 0.5 * x * (1.0 + torch.tanh(GELU_C * (x + 0.044715 * x * x * x)))
    return nn.functional.gelu(x, approximate="tanh")


class RMSNorm(nn.Module):
    """RMSNorm written out (XNNPACK delegates every op here; LayerNorm would fall to portable kernels)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        # The mean over the last dim as a matmul: XNNPACK's mean does not take it (graph would split).
        self.register_buffer("avg", torch.full((1, dim), 1.0 / dim), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(nn.functional.linear(x * x, self.avg) + self.eps) * self.weight


class TokenLinear(nn.Linear):
    """nn.Linear applied to [B,N,C] through a [B*N,C] view: exports as one Gemm (bias fused) instead of
    MatMul + Add, which made the MNN flow head ~1.5x faster (measured: 17.0 -> 10.9 ms). Same parameters."""

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3:
            return super().forward(x)
        b, n, c = x.shape
        return super().forward(x.reshape(b * n, c)).reshape(b, n, self.out_features)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = TokenLinear(dim, hidden)
        self.fc2 = TokenLinear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(gelu_tanh(self.fc1(x)))


class Attention(nn.Module):
    """Multi-head attention as 3-D bmm: one XNNPACK delegate (4-D matmul adds expand_copy, which splits it)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.q = TokenLinear(dim, dim)
        self.k = TokenLinear(dim, dim)
        self.v = TokenLinear(dim, dim)
        self.out = TokenLinear(dim, dim)

    def split(self, x: Tensor) -> Tensor:
        """[B,N,C] -> [B*heads, N, C/heads]."""
        b, n, _ = x.shape
        return x.reshape(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3).reshape(b * self.heads, n, self.head_dim)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.split(self.k(x)), self.split(self.v(x))

    def attend(self, x: Tensor, k: Tensor, v: Tensor) -> Tensor:
        b, n, c = x.shape
        q = self.split(self.q(x) * self.scale)
        w = torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1)
        o = torch.bmm(w, v).reshape(b, self.heads, n, self.head_dim).permute(0, 2, 1, 3).reshape(b, n, c)
        return self.out(o)

    def forward(self, x: Tensor, ctx: Tensor | None = None) -> Tensor:
        k, v = self.keys_values(x if ctx is None else ctx)
        return self.attend(x, k, v)


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.n1, self.attn = RMSNorm(dim), Attention(dim, heads)
        self.n2, self.mlp = RMSNorm(dim), MLP(dim, dim * mlp_ratio)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class DecoderBlock(nn.Module):
    """Self-attention over the action tokens, cross-attention to the (fixed) observation context."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.n1, self.self_attn = RMSNorm(dim), Attention(dim, heads)
        self.n2, self.cross = RMSNorm(dim), Attention(dim, heads)
        self.n3, self.mlp = RMSNorm(dim), MLP(dim, dim * mlp_ratio)

    def forward(self, x: Tensor, ck: Tensor, cv: Tensor) -> Tensor:
        x = x + self.self_attn(self.n1(x))
        x = x + self.cross.attend(self.n2(x), ck, cv)
        return x + self.mlp(self.n3(x))


class SpatialSoftmax(nn.Module):
    """Feature map -> K expected (x, y) image positions -> one token (robomimic-style keypoints).

    Grid features alone left the policy reaching ~10 cm off target (measured); keypoints hand the
    backbone object positions directly. Written as conv + softmax + Gemm so every runtime takes it.
    The logits get a fixed gain: at their initial scale (std ~0.1, measured) every softmax stayed
    uniform through training, so every keypoint sat at the image centre and carried nothing.
    """

    GAIN = 16.0

    def __init__(self, channels: int, side: int, keypoints: int, width: int) -> None:
        super().__init__()
        self.k = keypoints
        self.n = side * side
        self.maps = nn.Conv2d(channels, keypoints, 1)
        lin = torch.linspace(-1.0, 1.0, side)
        ys, xs = torch.meshgrid(lin, lin, indexing="ij")
        self.register_buffer("coords", torch.stack([xs.flatten(), ys.flatten()], 0), persistent=False)  # [2, side^2]
        self.proj = nn.Linear(2 * keypoints, width)

    def forward(self, x: Tensor) -> Tensor:
        b = x.shape[0]
        attn = torch.softmax(self.maps(x).reshape(b * self.k, self.n) * self.GAIN, dim=-1)
        xy = nn.functional.linear(attn, self.coords).reshape(b, 2 * self.k)
        return self.proj(xy).reshape(b, 1, -1)


class VisionEncoder(nn.Module):
    """Strided CNN shared by both cameras: 64x64 -> 4x4 grid tokens (+ a keypoint token) per camera.

    Cameras are told apart by their position embeddings.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for i, c in enumerate(cfg.cnn_channels):
            layers.append(nn.Conv2d(cin, c, 5 if i == 0 else 3, stride=2, padding=2 if i == 0 else 1))
            cin = c
        self.convs = nn.ModuleList(layers)
        self.proj = nn.Conv2d(cin, cfg.width, 3, stride=2, padding=1)
        # Keypoints from the second conv's map (1/4 resolution): fine enough to place small objects.
        self.kp_at = min(1, len(layers) - 1)
        self.keypoints = (SpatialSoftmax(cfg.cnn_channels[self.kp_at], cfg.image_size // 2 ** (self.kp_at + 1),
                                         cfg.keypoints, cfg.width) if cfg.keypoints else None)
        # One parameter per camera: indexing a stacked one exports select_copy, which XNNPACK does not take.
        self.pos_front = nn.Parameter(torch.randn(cfg.tokens_per_camera, cfg.width) * 0.02)
        self.pos_wrist = nn.Parameter(torch.randn(cfg.tokens_per_camera, cfg.width) * 0.02)
        self.register_buffer("pix_mean", torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1), persistent=True)
        self.register_buffer("pix_std", torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1), persistent=True)

    def forward(self, front: Tensor, wrist: Tensor) -> Tensor:
        b = front.shape[0]
        x = (torch.cat([front, wrist], dim=0) - self.pix_mean) / self.pix_std
        kp = None
        for i, conv in enumerate(self.convs):
            x = gelu_tanh(conv(x))
            if self.keypoints is not None and i == self.kp_at:
                kp = self.keypoints(x)
        x = self.proj(x).flatten(2).transpose(1, 2)  # [2B, T, W]
        if kp is not None:
            x = torch.cat([x, kp], dim=1)
        f, w = x[:b] + self.pos_front, x[b:] + self.pos_wrist
        return torch.cat([f, w], dim=1)


class Normalizer(nn.Module):
    """Dataset statistics as buffers, so exported graphs take and return raw values."""

    def __init__(self, state_dim: int, action_dim: int) -> None:
        super().__init__()
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.register_buffer("action_mean", torch.zeros(action_dim))
        self.register_buffer("action_std", torch.ones(action_dim))

    def set(self, stats: dict[str, "torch.Tensor | list[float]"]) -> None:
        for k in ("state_mean", "state_std", "action_mean", "action_std"):
            getattr(self, k).copy_(torch.as_tensor(stats[k], dtype=torch.float32))

    def as_dict(self) -> dict[str, list[float]]:
        return {k: getattr(self, k).tolist() for k in ("state_mean", "state_std", "action_mean", "action_std")}


class PrefixEncoder(nn.Module):
    """Stage 1 (once per inference): images + instruction embedding + raw state -> context tokens."""

    def __init__(self, cfg: ModelConfig, norm: Normalizer) -> None:
        super().__init__()
        self.norm = norm
        self.vision = VisionEncoder(cfg)
        self.lang = nn.Linear(cfg.embedding_dim, cfg.width)
        self.state = nn.Linear(cfg.state_dim, cfg.width)
        self.lang_type = nn.Parameter(torch.randn(1, 1, cfg.width) * 0.02)
        self.state_type = nn.Parameter(torch.randn(1, 1, cfg.width) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(cfg.width, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.prefix_layers))
        self.out_norm = RMSNorm(cfg.width)

    def forward(self, front: Tensor, wrist: Tensor, state: Tensor, instruction: Tensor,
                state_keep: Tensor | None = None) -> Tensor:
        """`state_keep` [B,1] (training only): 0 hides the proprioceptive state from the backbone."""
        s = (state - self.norm.state_mean) / self.norm.state_std
        if state_keep is not None:
            s = s * state_keep
        b = state.shape[0]
        lang = self.lang(instruction).reshape(b, 1, -1) + self.lang_type
        st = self.state(s).reshape(b, 1, -1) + self.state_type
        x = torch.cat([self.vision(front, wrist), lang, st], dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.out_norm(x)


class FlowHead(nn.Module):
    """Velocity field v(x_t, t, context) over an action chunk; per-row flow time (pinned rows t = 1)."""

    def __init__(self, cfg: ModelConfig, norm: Normalizer) -> None:
        super().__init__()
        self.cfg = cfg
        self.norm = norm
        w = cfg.width
        self.action_in = TokenLinear(cfg.action_dim, w)
        self.time_mlp1 = TokenLinear(2 * w, w)
        self.time_mlp2 = TokenLinear(w, w)
        self.pos = nn.Parameter(torch.randn(cfg.horizon, w) * 0.02)
        self.blocks = nn.ModuleList(DecoderBlock(w, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.head_layers))
        self.out_norm = RMSNorm(w)
        self.action_out = TokenLinear(w, cfg.action_dim)
        half = w // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half, dtype=torch.float32) / half) * 2 * math.pi
        self.register_buffer("freqs", freqs, persistent=False)

    def context_kv(self, context: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Cross-attention keys/values depend only on the context: computed once, not per Euler step."""
        return [blk.cross.keys_values(context) for blk in self.blocks]

    def velocity(self, x: Tensor, t: Tensor, kv: list[tuple[Tensor, Tensor]]) -> Tensor:
        """x: [B,H,D] normalised noisy actions; t: [B,H,1] per-row flow time."""
        ang = t * self.freqs  # [B,H,W/2]
        temb = torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)
        h = self.action_in(x)
        h = self.time_mlp2(self._swish(self.time_mlp1(torch.cat([h, temb], -1))))
        h = h + self.pos
        for blk, (k, v) in zip(self.blocks, kv):
            h = blk(h, k, v)
        return self.action_out(self.out_norm(h))

    @staticmethod
    def _swish(x: Tensor) -> Tensor:
        return x * torch.sigmoid(x)

    def to_model_space(self, actions: Tensor, state: Tensor) -> Tensor:
        """Raw absolute joint targets -> normalised (delta to the current state when action_mode=delta)."""
        if self.cfg.action_mode == "delta":
            actions = actions - state.reshape(state.shape[0], 1, state.shape[1])
        return (actions - self.norm.action_mean) / self.norm.action_std

    def to_raw(self, x: Tensor, state: Tensor) -> Tensor:
        a = x * self.norm.action_std + self.norm.action_mean
        if self.cfg.action_mode == "delta":
            a = a + state.reshape(state.shape[0], 1, state.shape[1])
        return a

    def forward(self, context: Tensor, state: Tensor, noise: Tensor, prefix: Tensor, prefix_mask: Tensor) -> Tensor:
        """Unrolled N-step Euler sampling with the first rows pinned; raw in, raw out.

        prefix_mask: float [B,H,1], 1 for pinned rows (the first d), 0 elsewhere.
        """
        kv = self.context_kv(context)
        p = self.to_model_space(prefix, state)
        keep = 1.0 - prefix_mask
        x = prefix_mask * p + keep * noise
        n = self.cfg.num_steps
        dt = 1.0 / n
        for i in range(n):
            t = prefix_mask + keep * (i * dt)
            x = x + dt * self.velocity(x, t, kv)
            x = prefix_mask * p + keep * x
        return prefix_mask * prefix + keep * self.to_raw(x, state)


class VLAPolicy(nn.Module):
    """The whole policy; `prefix_encoder` and `flow_head` are exported as the two runtime stages."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.norm = Normalizer(cfg.state_dim, cfg.action_dim)
        self.prefix_encoder = PrefixEncoder(cfg, self.norm)
        self.flow_head = FlowHead(cfg, self.norm)
        if cfg.aux_offsets:  # never exported: only the two stages above are
            k = len(cfg.aux_offsets)
            self.aux_head = nn.Sequential(RMSNorm(cfg.width), nn.Linear(cfg.width, k * cfg.state_dim))
            self.register_buffer("aux_scale", torch.ones(k, cfg.state_dim))

    def forward(self, front: Tensor, wrist: Tensor, state: Tensor, instruction: Tensor,
                noise: Tensor, prefix: Tensor, prefix_mask: Tensor) -> Tensor:
        ctx = self.prefix_encoder(front, wrist, state, instruction)
        return self.flow_head(ctx, state, noise, prefix, prefix_mask)

    def loss(self, front: Tensor, wrist: Tensor, state: Tensor, instruction: Tensor, actions: Tensor,
             prefix_len: Tensor, repeats: int = 1, state_dropout: float = 0.0, future: Tensor | None = None,
             aux_weight: float = 0.0) -> Tensor:
        """Flow-matching loss with prefix conditioning; `repeats` noise/time draws share one context.

        actions: raw [B,H,D]; prefix_len: long [B] in 0..max_prefix (rows < prefix_len are clean, t=1,
        excluded from the loss). Time ~ 1 - (0.999 Beta(1.5, 1) + 0.001): pi0's emphasis on noisy times.
        `state_dropout`: fraction of samples whose backbone does not see the joint state. Measured: with
        the state always visible the policy copied the mean trajectory and ignored the images (swapping
        images changed its first chunk by 0.003 rad where demonstrations differ by 0.12).
        `future` [B,K,D] raw joint positions at `aux_offsets` steps ahead, regressed from the pooled
        context with weight `aux_weight`: a dense signal that makes the images say where the arm goes.
        """
        b, hor, d = actions.shape
        keep = None
        if state_dropout > 0:
            keep = (torch.rand(b, 1, device=state.device) >= state_dropout).float()
        ctx = self.prefix_encoder(front, wrist, state, instruction, keep)
        x1 = self.flow_head.to_model_space(actions, state)
        if repeats > 1:
            ctx = ctx.repeat_interleave(repeats, 0)
            x1 = x1.repeat_interleave(repeats, 0)
            prefix_len = prefix_len.repeat_interleave(repeats, 0)
        n = x1.shape[0]
        rows = torch.arange(hor, device=x1.device).unsqueeze(0)
        mask = (rows < prefix_len.unsqueeze(1)).float().unsqueeze(-1)  # [n,H,1]
        s = torch.distributions.Beta(1.5, 1.0).sample((n, 1, 1)) * 0.999 + 0.001
        t = 1.0 - s
        x0 = torch.randn_like(x1)
        xt = t * x1 + (1 - t) * x0
        tt = mask + (1 - mask) * t
        xt = mask * x1 + (1 - mask) * xt
        kv = self.flow_head.context_kv(ctx)
        v = self.flow_head.velocity(xt, tt.expand(n, hor, 1), kv)
        err = ((v - (x1 - x0)) ** 2).mean(-1, keepdim=True) * (1 - mask)
        flow = err.sum() / (1 - mask).sum().clamp_min(1.0)
        if future is None or aux_weight <= 0 or not self.cfg.aux_offsets:
            return flow
        ctx0 = ctx[:b] if repeats == 1 else ctx[::repeats]
        pred = self.aux_head(ctx0.mean(dim=1)).reshape(b, len(self.cfg.aux_offsets), -1)
        target = (future - state.unsqueeze(1)) / self.aux_scale
        return flow + aux_weight * ((pred - target) ** 2).mean()


def count_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())
