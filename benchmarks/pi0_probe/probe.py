"""Can LeRobot's own pi0 / pi0.5 be built, run and saved here, offline, from PyPI packages only?

    <probe venv>/bin/python probe.py --policy pi0|pi05 --size smallest|default|patched-tiny OUT_DIR

Runs in LeRobot's venv (lerobot[pi]==0.6.1 on Python 3.12; see README.md), never in the project's. Every phase is
recorded in OUT_DIR/result.json: status, seconds, peak RSS, and on failure the exception verbatim.

Phases: config (PI0Config / PI05Config) -> construct (seeded random init) -> processors (LeRobot's
make_pi0*_pre_post_processors, first as written, then with tokenizer_name pointing at a local stand-in) ->
select_action on one dummy observation -> save_pretrained (policy + processors) -> layout of what was written
(files, config.json, safetensors key prefixes with parameter counts, processor JSONs).

Sizes:
  smallest      the smallest the config validates: paligemma_variant = action_expert_variant = "gemma_300m"
  default       LeRobot's defaults: gemma_2b VLM + gemma_300m expert (~3.5 B parameters)
  patched-tiny  test size. Not reachable through PI0Config: get_gemma_config knows two variants only and the
                SigLIP / projector sizes are written into PaliGemmaWithExpertModel. This size replaces, in the probe's
                process only, get_gemma_config with a tiny Gemma and the PaliGemma config factory with a tiny SigLIP
                whose projection_dim follows the text width; LeRobot's modelling code runs otherwise unchanged.
The image resolution is 28 (2 x 2 SigLIP patches of 14) and the chunk 8 at every size (config fields), unless
--shapes published asks for LeRobot's defaults (224 px, chunk 50, 10 steps, 48 tokens).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

TASK = "pick up the red block"
STATE_DIM = ACTION_DIM = 6
CAMERAS = {"front": (3, 48, 64), "wrist": (3, 48, 64)}
SEED = 3
SHAPES = {"probe": (8, 3, 28, 24), "published": (50, 10, 224, 48)}  # chunk, flow steps, image px, prompt tokens


def rss_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2)


class Recorder:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.result: dict = {"phases": {}}

    def phase(self, name: str, fn):
        t0 = time.perf_counter()
        entry: dict = {}
        try:
            value = fn()
            entry["status"] = "ok"
        except BaseException as e:  # noqa: BLE001 - the probe records every failure verbatim
            value = None
            entry["status"] = "error"
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["traceback_tail"] = traceback.format_exc().strip().splitlines()[-12:]
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        entry["peak_rss_gb"] = rss_gb()
        self.result["phases"][name] = entry
        self.save()
        print(f"[{name}] {entry['status']} {entry['seconds']}s rss {entry['peak_rss_gb']} GB"
              + (f" -- {entry['error'][:400]}" if entry["status"] == "error" else ""), flush=True)
        return value

    def save(self) -> None:
        (self.out / "result.json").write_text(json.dumps(self.result, indent=1, default=str))


def write_tokenizer(directory: Path) -> Path:
    """A word-level stand-in for PaliGemma's tokenizer (none can be downloaded): BOS added, the words of the task,
    pi0.5's prompt words and the 256 state bins as tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = ["<pad>", "<unk>", "<bos>", "<eos>", "\n", ":", ",", ";", "Task", "State", "Action",
             *"pick up the red block put green cube on".split(), *[str(i) for i in range(256)]]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Punctuation("isolated")])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>",
        "bos_token": "<bos>", "eos_token": "<eos>", "model_max_length": 512}))
    return directory


def patch_tiny(policy: str) -> dict:
    """Test size inside this process only (see the module docstring). Returns what was patched."""
    from transformers import PaliGemmaConfig

    mod = __import__(f"lerobot.policies.{policy}.modeling_{policy}", fromlist=["x"])
    tiny = {"tiny_vlm": mod.GemmaConfig(width=64, depth=2, mlp_dim=128, num_heads=8, num_kv_heads=1, head_dim=8),
            "tiny_expert": mod.GemmaConfig(width=32, depth=2, mlp_dim=64, num_heads=8, num_kv_heads=1, head_dim=8)}
    original = mod.get_gemma_config
    mod.get_gemma_config = lambda variant: tiny[variant] if variant in tiny else original(variant)
    mapping = mod.CONFIG_MAPPING

    class TinyPaliGemma:
        """CONFIG_MAPPING stand-in: 'paligemma' gives a tiny SigLIP (LeRobot then sets intermediate_size 4304 and
        projection_dim 2048 on it; the projection width is put back to the text width before the model is built)."""

        def __getitem__(self, key):
            if key != "paligemma":
                return mapping[key]

            def make():
                cfg = PaliGemmaConfig(vision_config={"hidden_size": 32, "num_hidden_layers": 2,
                                                     "num_attention_heads": 2, "patch_size": 14,
                                                     "vision_use_head": False})
                return cfg
            return make

    mod.CONFIG_MAPPING = TinyPaliGemma()
    real_cls = mod.PaliGemmaForConditionalGenerationWithPiGemma

    def build(config):
        config.vision_config.projection_dim = config.text_config.hidden_size
        config.projection_dim = config.text_config.hidden_size
        return real_cls(config=config)

    mod.PaliGemmaForConditionalGenerationWithPiGemma = build
    return {k: vars(v) for k, v in tiny.items()}


def key_layout(path: Path) -> dict:
    """Key prefixes, parameter counts and dtypes from the safetensors header alone (no mmap of the weights)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    header.pop("__metadata__", None)
    groups: dict[str, dict] = {}
    dtypes: dict[str, int] = {}
    for k, info in header.items():
        n = int(np.prod(info["shape"])) if info["shape"] else 1
        dtypes[info["dtype"]] = dtypes.get(info["dtype"], 0) + 1
        parts = k.split(".")
        # grouped by the path up to the first layer index (or 5 components)
        cut = next((i for i, p in enumerate(parts) if p.isdigit()), min(len(parts) - 1, 5))
        g = ".".join(parts[:cut]) + (".N" if cut < len(parts) - 1 and parts[cut].isdigit() else "")
        e = groups.setdefault(g, {"tensors": 0, "params": 0})
        e["tensors"] += 1
        e["params"] += n
    shapes = {k: v["shape"] for k, v in sorted(header.items()) if ".layers.0." in k or ".layers." not in k}
    return {"tensors": len(header), "params": sum(g["params"] for g in groups.values()), "dtypes": dtypes,
            "groups": groups, "shapes_without_layer_repeats": shapes}


def layout(ckpt: Path) -> dict:
    files = {p.name: p.stat().st_size for p in sorted(ckpt.iterdir())}
    lay = {"files": files, "config.json": json.loads((ckpt / "config.json").read_text())}
    lay["safetensors"] = key_layout(ckpt / "model.safetensors")
    for p in sorted(ckpt.glob("policy_*.json")):
        lay[p.name] = json.loads(p.read_text())
    return lay


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", choices=("pi0", "pi05"), required=True)
    ap.add_argument("--size", choices=("smallest", "default", "patched-tiny"), required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shapes", choices=sorted(SHAPES), default="probe",
                    help="probe: chunk 8, 3 steps, 28 px, 24 tokens; published: LeRobot's defaults, 50, 10, 224, 48")
    ap.add_argument("out", type=Path)
    ap.add_argument("--layout-only", action="store_true", help="only (re)read OUT_DIR/pretrained_model's layout")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(a.out)
    if a.layout_only:
        rec.result = json.loads((a.out / "result.json").read_text())
        rec.phase("layout", lambda: rec.result.__setitem__("layout", layout(a.out / "pretrained_model")))
        return 0
    import importlib.metadata as md

    rec.result["versions"] = {p: md.version(p) for p in ("lerobot", "torch", "transformers", "huggingface-hub",
                                                         "tokenizers", "safetensors")}
    rec.result["versions"]["python"] = sys.version.split()[0]
    rec.result["args"] = {"policy": a.policy, "size": a.size, "dtype": a.dtype}
    torch.set_num_threads(2)

    from lerobot.configs.types import FeatureType, PolicyFeature

    pol = a.policy
    cfg_mod = __import__(f"lerobot.policies.{pol}.configuration_{pol}", fromlist=["x"])
    model_mod = __import__(f"lerobot.policies.{pol}.modeling_{pol}", fromlist=["x"])
    proc_mod = __import__(f"lerobot.policies.{pol}.processor_{pol}", fromlist=["x"])
    Config = cfg_mod.PI0Config if pol == "pi0" else cfg_mod.PI05Config
    Policy = model_mod.PI0Policy if pol == "pi0" else model_mod.PI05Policy
    make_processors = getattr(proc_mod, f"make_{pol}_pre_post_processors")

    inputs = {f"observation.images.{c}": PolicyFeature(FeatureType.VISUAL, s) for c, s in CAMERAS.items()}
    inputs["observation.state"] = PolicyFeature(FeatureType.STATE, (STATE_DIM,))
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (ACTION_DIM,))}
    shapes = SHAPES[a.shapes]
    common = dict(input_features=inputs, output_features=outputs, device="cpu", dtype=a.dtype, chunk_size=shapes[0],
                  n_action_steps=shapes[0], num_inference_steps=shapes[1], image_resolution=(shapes[2], shapes[2]),
                  tokenizer_max_length=shapes[3], max_state_dim=8, max_action_dim=8)

    # The config's own limit, recorded verbatim: a variant other than the two it knows.
    def below_smallest():
        Config(paligemma_variant="gemma_tiny", **common)
    rec.phase("config_below_smallest", below_smallest)

    variants = {"smallest": ("gemma_300m", "gemma_300m"), "default": ("gemma_2b", "gemma_300m"),
                "patched-tiny": ("gemma_300m", "gemma_300m")}[a.size]

    def make_config():
        c = Config(paligemma_variant=variants[0], action_expert_variant=variants[1], **common)
        if a.size == "patched-tiny":
            rec.result["patched"] = patch_tiny(pol)
            c.paligemma_variant, c.action_expert_variant = "tiny_vlm", "tiny_expert"
        return c
    cfg = rec.phase("config", make_config)
    if cfg is None:
        return 1

    def construct():
        torch.manual_seed(SEED)
        p = Policy(cfg).eval()
        rec.result["parameters"] = sum(t.numel() for t in p.parameters())
        return p
    policy = rec.phase("construct", construct)

    rng = np.random.default_rng(SEED)
    dims = {"observation.state": STATE_DIM, "action": ACTION_DIM}
    stats = {}
    for k, d in dims.items():
        mean = rng.normal(0, 0.5, d).astype(np.float32)
        std = rng.uniform(0.2, 1.5, d).astype(np.float32)
        stats[k] = {"mean": torch.from_numpy(mean), "std": torch.from_numpy(std),
                    "min": torch.from_numpy(mean - 2 * std), "max": torch.from_numpy(mean + 2 * std),
                    **{f"q{q:02d}": torch.from_numpy(mean + (q - 50) / 25 * std) for q in (1, 10, 50, 90, 99)}}

    rec.phase("processors_as_written", lambda: make_processors(cfg, stats))

    tok_dir = write_tokenizer(a.out / "standin_tokenizer")

    def processors_with_local_tokenizer():
        """The same pipelines with tokenizer_name pointing at a local directory (LeRobot loads it with
        AutoTokenizer.from_pretrained and records that name in policy_preprocessor.json)."""
        real = proc_mod.TokenizerProcessorStep

        def step(**kw):
            rec.result["tokenizer_name_as_written"] = kw["tokenizer_name"]
            return real(**{**kw, "tokenizer_name": str(tok_dir)})
        proc_mod.TokenizerProcessorStep = step
        try:
            return make_processors(cfg, stats)
        finally:
            proc_mod.TokenizerProcessorStep = real
    procs = rec.phase("processors_local_tokenizer", processors_with_local_tokenizer)

    raw = {f"observation.images.{c}": torch.from_numpy(rng.random(s, dtype=np.float32)) for c, s in CAMERAS.items()}
    raw["observation.state"] = torch.from_numpy(rng.normal(0, 1, STATE_DIM).astype(np.float32))
    raw["task"] = TASK

    def select():
        batch = procs[0](dict(raw))
        rec.result["batch"] = {k: (list(v.shape), str(v.dtype)) if torch.is_tensor(v) else v for k, v in batch.items()}
        torch.manual_seed(SEED)
        t0 = time.perf_counter()
        act = policy.select_action(batch)
        rec.result["select_action_seconds"] = round(time.perf_counter() - t0, 2)
        out = procs[1](act)
        rec.result["action"] = out.tolist()
        return out
    if policy is not None and procs is not None:
        rec.phase("select_action", select)

    ckpt = a.out / "pretrained_model"

    def save():
        policy.save_pretrained(ckpt)
        if procs is not None:
            procs[0].save_pretrained(ckpt)
            procs[1].save_pretrained(ckpt)
    if policy is not None:
        rec.phase("save_pretrained", save)

    def write_layout():
        rec.result["layout"] = layout(ckpt)
    if (ckpt / "model.safetensors").is_file():
        rec.phase("layout", write_layout)
    rec.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
