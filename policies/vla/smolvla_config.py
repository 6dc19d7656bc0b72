"""SmolVLA's architecture as LeRobot 0.4.4 builds it (lerobot/policies/smolvla/), from the VLM's published config.

`full()` is the published size (SmolVLM2-500M-Video-Instruct's SigLIP + text model truncated to 16 layers + an
action expert at 0.75 width: ~450 M parameters); `tiny()` is the same architecture at test size. `vlm_config()`
writes the Hugging Face config dict LeRobot's own code reads, so both sides are built from one description.
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

PUBLISHED_VLM_CONFIG = Path(__file__).with_name("smolvlm2_500m_video_instruct.json")


class VisionArch(BaseModel):
    """SigLIP encoder of SmolVLM (SmolVLMVisionTransformer)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    image_size: int
    patch_size: int
    layer_norm_eps: float


class TextArch(BaseModel):
    """The Llama text model of SmolVLM (SmolLM2), before LeRobot truncates it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float


class StagedVlaShape(BaseModel):
    """What every staged VLA (SmolVLA, pi0 / pi0.5) shares: the flow schedule and chunk, the padded state and action
    widths, the language length, and the deployment's static shapes (cameras, state / action dims). Defaults are
    LeRobot's for both."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    chunk_size: int = 50
    num_steps: int = 10
    max_state_dim: int = 32
    max_action_dim: int = 32
    tokenizer_max_length: int = 48
    min_period: float = 4e-3
    max_period: float = 4.0
    cameras: int = 2
    state_dim: int = 6
    action_dim: int = 6
    camera_hw: tuple[int, int] | None = None  # the cameras' (height, width) when not the encoder's square size
    vision: VisionArch

    @property
    def camera_shape(self) -> tuple[int, int]:
        """What the vision stage takes: the camera's resolution, resized with padding inside the stage."""
        return self.camera_hw or (self.vision.image_size, self.vision.image_size)


class SmolVLAArch(StagedVlaShape):
    """SmolVLAConfig fields that shape the network."""

    text: TextArch
    scale_factor: int
    num_vlm_layers: int = 16
    expert_width_multiplier: float = 0.75
    self_attn_every_n_layers: int = 2

    @property
    def image_tokens(self) -> int:
        """Tokens per camera after the connector's pixel shuffle."""
        return (self.vision.image_size // self.vision.patch_size) ** 2 // self.scale_factor ** 2

    @property
    def prefix_len(self) -> int:
        """Images, then language padded to tokenizer_max_length, then one state token."""
        return self.cameras * self.image_tokens + self.tokenizer_max_length + 1

    @property
    def expert_hidden(self) -> int:
        return int(self.text.hidden_size * self.expert_width_multiplier)

    @property
    def expert_intermediate(self) -> int:
        """smolvlm_with_expert.get_intermediate_size: 4 * (2/3 width), rounded up to a multiple of 256."""
        h = int(4 * int(2 * self.expert_hidden / 3))
        return 256 * ((h + 255) // 256)

    def vlm_config(self) -> dict:
        """The Hugging Face SmolVLM config dict (what AutoConfig.from_pretrained reads) for LeRobot's side."""
        return {
            "architectures": ["SmolVLMForConditionalGeneration"], "model_type": "smolvlm",
            "scale_factor": self.scale_factor, "tie_word_embeddings": False, "vocab_size": self.text.vocab_size,
            "text_config": {"model_type": "llama", "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
                            "max_position_embeddings": 8192, "rope_theta": 100000, "tie_word_embeddings": False,
                            **self.text.model_dump()},
            "vision_config": {"model_type": "smolvlm_vision", "hidden_act": "gelu_pytorch_tanh", "num_channels": 3,
                              **self.vision.model_dump()},
        }


def full(cameras: int = 2) -> SmolVLAArch:
    """The published size: SmolVLM2-500M-Video-Instruct's config file with LeRobot's SmolVLAConfig defaults."""
    pub = json.loads(PUBLISHED_VLM_CONFIG.read_text())
    vision = VisionArch(**{k: pub["vision_config"][k] for k in VisionArch.model_fields})
    text = TextArch(**{k: pub["text_config"][k] for k in TextArch.model_fields})
    return SmolVLAArch(vision=vision, text=text, scale_factor=pub["scale_factor"], cameras=cameras)


def tiny() -> SmolVLAArch:
    """Same architecture (GQA, interleaved self/cross expert layers, pixel shuffle), test size: runs in milliseconds."""
    vision = VisionArch(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                        image_size=64, patch_size=16, layer_norm_eps=1e-6)
    text = TextArch(hidden_size=48, intermediate_size=96, num_hidden_layers=6, num_attention_heads=3,
                    num_key_value_heads=1, head_dim=16, vocab_size=128, rms_norm_eps=1e-5)
    return SmolVLAArch(vision=vision, text=text, scale_factor=2, num_vlm_layers=4, chunk_size=8, num_steps=3,
                       max_state_dim=8, max_action_dim=8, tokenizer_max_length=6, state_dim=3, action_dim=3)


SIZES = {"full": full, "tiny": tiny}
