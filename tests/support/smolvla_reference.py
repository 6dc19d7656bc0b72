"""LeRobot's own SmolVLA, run in its own environment (lerobot_env.lerobot_python; never imported by the project).

    python smolvla_reference.py OUT_DIR SPEC.json

SPEC holds the SmolVLM config dict (SmolVLAArch.vlm_config()), the SmolVLAConfig fields and the deployment's
shapes. The policy is built by LeRobot's SmolVLAPolicy with random weights (seeded) from that config, written to
OUT_DIR/config.json as AutoConfig reads it: nothing is downloaded (HF_HUB_OFFLINE). The processor (tokenizer) is
not needed when token ids are fed, so AutoProcessor is replaced by a stub carrying the two image-token ids the
model reads at construction (only used when add_image_special_tokens, off by default).

Writes OUT_DIR/model.safetensors (SmolVLAPolicy.state_dict()) and OUT_DIR/io.npz: the inputs, and per stage the
reference outputs of LeRobot's own methods (embed_image per camera; the prefix pass's KV cache; one
denoise_step as an Euler step) and predict_action_chunk end to end.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

# The published SmolVLM2 tokenizer's <fake_token_around_image> and <global-img> ids.
FAKE_IMAGE_TOKEN_ID, GLOBAL_IMAGE_TOKEN_ID = 49189, 49152


class _StubProcessor:
    @staticmethod
    def from_pretrained(*_args, **_kwargs) -> SimpleNamespace:
        return SimpleNamespace(tokenizer=SimpleNamespace(fake_image_token_id=FAKE_IMAGE_TOKEN_ID,
                                                         global_image_token_id=GLOBAL_IMAGE_TOKEN_ID))


def build_policy(out: Path, spec: dict):  # noqa: ANN201
    import lerobot.policies.smolvla.smolvlm_with_expert as swe
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    swe.AutoProcessor = _StubProcessor
    (out / "config.json").write_text(json.dumps(spec["vlm_config"]))
    s = spec["smolvla"]
    size = spec["image_size"]
    inputs = {f"observation.images.cam{i}": PolicyFeature(FeatureType.VISUAL, (3, size, size))
              for i in range(spec["cameras"])}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (spec["state_dim"],))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (spec["action_dim"],))}
    cfg = SmolVLAConfig(input_features=inputs, output_features=outputs, vlm_model_name=str(out),
                        load_vlm_weights=False, n_action_steps=s["chunk_size"], resize_imgs_with_padding=(size, size),
                        device="cpu", **s)
    torch.manual_seed(spec["seed"])
    return SmolVLAPolicy(cfg).eval()


@torch.no_grad()
def main(out: Path, spec: dict) -> None:
    from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks
    from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS, OBS_STATE
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec))
    policy = build_policy(out, spec)
    save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(out / "model.safetensors"))
    model, s = policy.model, spec["smolvla"]
    rng = np.random.default_rng(spec["seed"])
    n, size = s["tokenizer_max_length"], spec["image_size"]
    images = rng.random((spec["cameras"], 1, 3, size, size), dtype=np.float32)
    tokens = rng.integers(0, spec["vlm_config"]["text_config"]["vocab_size"], (1, n)).astype(np.int64)
    mask = np.arange(n)[None] < spec["valid_tokens"]
    state = rng.standard_normal((1, spec["state_dim"])).astype(np.float32)
    noise = rng.standard_normal((1, s["chunk_size"], s["max_action_dim"])).astype(np.float32)

    imgs = [torch.from_numpy(im) for im in images]
    vision = [model.vlm_with_expert.embed_image(im * 2.0 - 1.0)[0].numpy() for im in imgs]
    state_pad = torch.zeros(1, s["max_state_dim"])
    state_pad[:, :spec["state_dim"]] = torch.from_numpy(state)
    img_masks = [torch.ones(1, dtype=torch.bool) for _ in imgs]
    embs, pad, att = model.embed_prefix([im * 2.0 - 1.0 for im in imgs], img_masks, torch.from_numpy(tokens),
                                        torch.from_numpy(mask), state=state_pad)
    _, kv = model.vlm_with_expert.forward(attention_mask=make_att_2d_masks(pad, att),
                                          position_ids=torch.cumsum(pad, dim=1) - 1, past_key_values=None,
                                          inputs_embeds=[embs, None], use_cache=True, fill_kv_cache=True)
    keys = torch.cat([kv[i]["key_states"] for i in sorted(kv)], dim=0).numpy()
    values = torch.cat([kv[i]["value_states"] for i in sorted(kv)], dim=0).numpy()
    x = torch.from_numpy(noise)
    v_t = model.denoise_step(prefix_pad_masks=pad, past_key_values=kv, x_t=x, timestep=torch.ones(1))
    step = (x + (-1.0 / s["num_steps"]) * v_t).numpy()

    batch = {f"observation.images.cam{i}": imgs[i] for i in range(spec["cameras"])}
    batch[OBS_STATE] = torch.from_numpy(state)
    batch[OBS_LANGUAGE_TOKENS] = torch.from_numpy(tokens)
    batch[OBS_LANGUAGE_ATTENTION_MASK] = torch.from_numpy(mask)
    actions = policy.predict_action_chunk(batch, noise=torch.from_numpy(noise)).numpy()
    np.savez(out / "io.npz", images=images, lang_tokens=tokens, lang_mask=mask.astype(np.float32), state=state,
             state_padded=state_pad.numpy(), noise=noise, vision=np.stack(vision), keys=keys, values=values,
             step=step, actions=actions, parameters=np.array(sum(p.numel() for p in policy.parameters())),
             torch=np.array(torch.__version__))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: smolvla_reference.py OUT_DIR SPEC.json")
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
