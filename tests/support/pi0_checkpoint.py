"""A pi0 / pi0.5 checkpoint written by LeRobot 0.6.1's own code at test size, and what LeRobot makes of one observation.

    python pi0_checkpoint.py OUT_DIR SPEC.json      (in lerobot_env.pi0_python(); never imported by the project)

SPEC: {"policy": "pi0" | "pi05", "tokenizer_dir": a local tokenizer (tokenizer.json + tokenizer_config.json),
"fields": PI0Config / PI05Config fields, "vlm" / "expert": Gemma sizes, "vision": SigLIP sizes, "cameras":
{name: [3, h, w]}, "state_dim", "action_dim", "seed", "task"}.

Test size is not reachable through LeRobot's config (get_gemma_config knows gemma_300m and gemma_2b; the SigLIP and
projector sizes are written into PaliGemmaWithExpertModel): inside this process only, get_gemma_config answers the
two variant names "test_vlm" / "test_expert" and the PaliGemma config factory gives a small SigLIP whose projection
follows the text width, as benchmarks/pi0_probe/probe.py does. The rest is LeRobot's code, unchanged: the policy
(seeded random init; constant-initialised parameters perturbed), make_pi0*_pre_post_processors with seeded dataset
statistics (tokenizer_name pointing at the local tokenizer), save_pretrained of all three into
OUT_DIR/pretrained_model, then PI0Policy.from_pretrained of that directory runs one raw observation: preprocessor ->
predict_action_chunk(noise) -> postprocessor.

OUT_DIR/io.npz: the raw inputs, the noise (robot columns; padded: zeros beyond), the tokens LeRobot's pipeline made,
the normalised padded state, the actions (normalised and raw), and per stage LeRobot's own intermediate results:
embed_image per camera (of _preprocess_images' output), the prefix pass's KV cache, one denoise_step at t = 1 as an
Euler step.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

QUANTILES = (1, 10, 50, 90, 99)


def patch_test_size(mod, spec: dict) -> None:  # noqa: ANN001
    """get_gemma_config and the PaliGemma config factory of LeRobot's modeling module, in this process only."""
    from transformers import PaliGemmaConfig

    sizes = {"test_vlm": mod.GemmaConfig(**spec["vlm"]), "test_expert": mod.GemmaConfig(**spec["expert"])}
    original = mod.get_gemma_config
    mod.get_gemma_config = lambda variant: sizes[variant] if variant in sizes else original(variant)
    mapping = mod.CONFIG_MAPPING

    class TestPaliGemma:
        def __getitem__(self, key: str):  # noqa: ANN204
            if key != "paligemma":
                return mapping[key]
            return lambda: PaliGemmaConfig(vision_config={**spec["vision"], "vision_use_head": False})

    mod.CONFIG_MAPPING = TestPaliGemma()
    real = mod.PaliGemmaForConditionalGenerationWithPiGemma

    def build(config):  # noqa: ANN001, ANN202
        config.vision_config.projection_dim = config.text_config.hidden_size
        config.projection_dim = config.text_config.hidden_size
        return real(config=config)

    mod.PaliGemmaForConditionalGenerationWithPiGemma = build


def _stats(rng: np.random.Generator, dim: int) -> dict[str, torch.Tensor]:
    mean = rng.normal(0.0, 0.5, dim).astype(np.float32)
    std = rng.uniform(0.2, 1.5, dim).astype(np.float32)
    out = {"mean": mean, "std": std, "min": mean - 2 * std, "max": mean + 2 * std,
           **{f"q{q:02d}": mean + (q - 50) / 25 * std for q in QUANTILES}}
    return {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in out.items()}


def _cache(kv) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """DynamicCache -> keys, values as (layers, positions, kv_heads, head_dim)."""
    layers = list(kv)
    keys = torch.cat([k.transpose(1, 2) for k, _v, *_ in layers], dim=0)
    values = torch.cat([v.transpose(1, 2) for _k, v, *_ in layers], dim=0)
    return keys.numpy(), values.numpy()


@torch.no_grad()
def stage_references(policy, batch: dict, noise: torch.Tensor, pi05: bool) -> dict[str, np.ndarray]:  # noqa: ANN001
    """LeRobot's own methods, in sample_actions' order, up to the first denoise_step."""
    from lerobot.policies.common.vla_utils import make_att_2d_masks, prepare_attention_masks_4d

    model = policy.model
    images, img_masks = policy._preprocess_images(batch)  # noqa: SLF001
    vision = np.stack([model.paligemma_with_expert.embed_image(im)[0].numpy() for im in images])
    tokens, masks = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    embs, pad, att = model.embed_prefix(images, img_masks, tokens, masks)
    att4 = prepare_attention_masks_4d(make_att_2d_masks(pad, att))
    model.paligemma_with_expert.paligemma.model.language_model.config._attn_implementation = "eager"  # noqa: SLF001
    _, kv = model.paligemma_with_expert.forward(attention_mask=att4, position_ids=torch.cumsum(pad, dim=1) - 1,
                                                past_key_values=None, inputs_embeds=[embs, None], use_cache=True)
    keys, values = _cache(kv)
    t = torch.ones(1)
    if pi05:
        v_t = model.denoise_step(prefix_pad_masks=pad, past_key_values=kv, x_t=noise, timestep=t)
    else:
        v_t = model.denoise_step(state=policy.prepare_state(batch), prefix_pad_masks=pad, past_key_values=kv,
                                 x_t=noise, timestep=t)
    step = (noise + (-1.0 / policy.config.num_inference_steps) * v_t).numpy()
    return {"vision": vision, "keys": keys, "values": values, "step": step,
            "preprocessed": np.stack([im.numpy() for im in images])}


@torch.no_grad()
def main(out: Path, spec: dict) -> None:
    from lerobot.configs.types import FeatureType, PolicyFeature

    pol = spec["policy"]
    cfg_mod = __import__(f"lerobot.policies.{pol}.configuration_{pol}", fromlist=["x"])
    model_mod = __import__(f"lerobot.policies.{pol}.modeling_{pol}", fromlist=["x"])
    proc_mod = __import__(f"lerobot.policies.{pol}.processor_{pol}", fromlist=["x"])
    config_cls = cfg_mod.PI0Config if pol == "pi0" else cfg_mod.PI05Config
    policy_cls = model_mod.PI0Policy if pol == "pi0" else model_mod.PI05Policy
    patch_test_size(model_mod, spec)

    inputs = {f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, tuple(s))
              for c, s in spec["cameras"].items()}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (spec["state_dim"],))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (spec["action_dim"],))}
    cfg = config_cls(paligemma_variant="gemma_300m", action_expert_variant="gemma_300m", input_features=inputs,
                     output_features=outputs, device="cpu", dtype="float32", **spec["fields"])
    cfg.paligemma_variant, cfg.action_expert_variant = "test_vlm", "test_expert"
    torch.manual_seed(spec["seed"])
    policy = policy_cls(cfg).eval()
    for param in policy.parameters():  # norms start at 0 / 1 and pi0.5's adaptive norms' weights at 0: noise makes
        if bool((param == param.flatten()[0]).all()):  # their use (which norm, scale/shift/gate, the time MLP) visible
            param.add_(0.1 * torch.randn_like(param))
    rng = np.random.default_rng(spec["seed"])
    stats = {"observation.state": _stats(rng, spec["state_dim"]), "action": _stats(rng, spec["action_dim"])}
    real_step = proc_mod.TokenizerProcessorStep
    proc_mod.TokenizerProcessorStep = lambda **kw: real_step(**{**kw, "tokenizer_name": spec["tokenizer_dir"]})
    pre, post = getattr(proc_mod, f"make_{pol}_pre_post_processors")(cfg, stats)
    ckpt = out / "pretrained_model"
    policy.save_pretrained(ckpt)
    pre.save_pretrained(ckpt)
    post.save_pretrained(ckpt)

    # What a user of the checkpoint runs: its weights loaded by LeRobot (the config object is passed in because
    # PI0Config's own validation refuses the test-size variant names written into config.json).
    policy = policy_cls.from_pretrained(ckpt, config=cfg).eval()
    images = {c: rng.random(tuple(s), dtype=np.float32) for c, s in spec["cameras"].items()}
    state = rng.normal(0.0, 1.0, spec["state_dim"]).astype(np.float32)
    raw = {f"observation.images.{c}": torch.from_numpy(im) for c, im in images.items()}
    raw["observation.state"] = torch.from_numpy(state)
    raw["task"] = spec["task"]
    batch = pre(raw)
    noise = np.zeros((1, cfg.chunk_size, cfg.max_action_dim), np.float32)
    noise[:, :, :spec["action_dim"]] = rng.standard_normal((1, cfg.chunk_size, spec["action_dim"]))
    refs = stage_references(policy, batch, torch.from_numpy(noise), pol == "pi05")
    normalised = policy.predict_action_chunk(batch, noise=torch.from_numpy(noise))
    actions = post(normalised).numpy()
    state_padded = np.zeros((1, cfg.max_state_dim), np.float32)
    state_padded[:, :spec["state_dim"]] = batch["observation.state"].numpy()
    np.savez(out / "io.npz", state=state, noise=noise[:, :, :spec["action_dim"]], noise_padded=noise, actions=actions,
             actions_normalised=normalised.numpy(),
             lang_tokens=batch["observation.language.tokens"].numpy(),
             lang_mask=batch["observation.language.attention_mask"].numpy().astype(np.float32),
             state_padded=state_padded, parameters=np.array(sum(p.numel() for p in policy.parameters())),
             **refs, **{f"image.{c}": im for c, im in images.items()})


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: pi0_checkpoint.py OUT_DIR SPEC.json")
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
