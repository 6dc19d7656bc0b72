"""A state-prompt (pi0.5) bundle: StagedVLARuntime tokenises `template` with the instruction and the normalised
state's bins on every inference, and feeds those ids and their mask to the prefix. Toy stages record what they
are given; the expected bins are written from the manifest's prose (docs/bundle_format.md: k with -1 + 2k/bins <= x
< -1 + 2(k+1)/bins, -1 below -1, bins - 1 from 1 up), not from the runtime's np.digitize.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
from pydantic import ValidationError
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from omni_vla.runtime.bundle import artifact_spec, write_json_atomic
from omni_vla.runtime.chunk_manifest import CHUNK_FORMAT, ChunkStageSpec
from omni_vla.runtime.vla import StagedVLARuntime
from omni_vla.runtime.vla_manifest import VLA_KIND, VLAManifest

D, L, H, T, W, HW = 3, 20, 4, 2, 3, 8
KV = (1, 2 * T + L, 1, 2)
TEMPLATE = "Task: {task}, State: {state};\nAction: "
SUB, DIV = np.array([0.5, -1.0, 2.0], np.float32), np.array([2.0, 0.5, 4.0], np.float32)
WORDS = ["<pad>", "<unk>", "<bos>", "\n", ":", ",", ";", "-", "Task", "State", "Action", "go", "left",
         *map(str, range(256))]


def write_tokenizer(path: Path) -> Tokenizer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "removed"),
                                                 pre_tokenizers.Split("\n", "isolated"),
                                                 pre_tokenizers.Punctuation("isolated")])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tok.save(str(path))
    return tok


def manifest(root: Path, language: dict) -> dict:
    t = lambda named: [{"name": n, "shape": s, "dtype": "int32" if n == "lang_tokens" else "float32"}  # noqa: E731
                       for n, s in named]
    x = (1, H, D)
    io = {"vision": ([("image", (1, 3, HW, HW))], [("image_tokens", (1, T, W))]),
          "prefix": ([("image_tokens", (2, T, W)), ("lang_tokens", (1, L)), ("lang_mask", (1, L)), ("state", (1, D))],
                     [("keys", KV), ("values", KV)]),
          "step": ([("x_t", x), ("time", (1,)), ("keys", KV), ("values", KV), ("lang_mask", (1, L))], [("x_next", x)]),
          "finish": ([("x", x)], [("actions", (1, H, D))])}
    stages = {}
    for stage, (ins, outs) in io.items():
        (root / f"{stage}.mnn").write_bytes(stage.encode())
        stages[stage] = {"inputs": t(ins), "outputs": t(outs),
                         "artifacts": {"mnn": artifact_spec(root, f"{stage}.mnn").model_dump()}}
    joints = [f"j{i}" for i in range(D)]
    return {"format": CHUNK_FORMAT, "kind": VLA_KIND, "policy": "toy", "source": {}, "control_rate_hz": 5.0,
            "cameras": [{"name": c, "height": HW, "width": HW} for c in ("front", "wrist")],
            "state": {"joint_names": joints, "units": ["rad"] * D},
            "action": {"joint_names": joints, "units": ["rad"] * D, "space": "absolute", "chunk_length": H,
                       "execute_steps": 2},
            "normalization": {k: {"subtract": SUB.tolist(), "divide": DIV.tolist()} for k in ("state", "action")},
            "language": language,
            "flow": {"num_steps": 2, "padded_state_dim": D, "padded_action_dim": D, "max_prefix": 1},
            "stages": stages, "versions": {}}


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    write_tokenizer(tmp_path / "tokenizer.json")
    lang = {"tokenizer": "toy", "max_tokens": L, "state_prompt": {"template": TEMPLATE, "bins": 256},
            "tokenizer_file": artifact_spec(tmp_path, "tokenizer.json").model_dump()}
    m = VLAManifest.model_validate(manifest(tmp_path, lang))
    write_json_atomic(tmp_path / "manifest.json", m.model_dump(mode="json"))
    return tmp_path


class Recorder:
    """Toy stages; keeps a copy of what the prefix was given on each run."""

    def __init__(self) -> None:
        self.prefix_inputs: list[list[np.ndarray]] = []

    def load(self, path: Path, spec: ChunkStageSpec, inputs: Sequence[np.ndarray], threads: int):  # noqa: ANN201
        def prefix() -> list[np.ndarray]:
            self.prefix_inputs.append([a.copy() for a in inputs])
            return [np.zeros(KV, np.float32), np.zeros(KV, np.float32)]

        return {"vision": lambda: [np.zeros((1, T, W), np.float32)], "prefix": prefix,
                "step": lambda: [inputs[0].copy()], "finish": lambda: [inputs[0].copy()]}[path.stem]


def open_runtime(bundle: Path) -> tuple[StagedVLARuntime, Recorder]:
    rec = Recorder()
    return StagedVLARuntime(bundle, "mnn", rec.load, check_versions=False, warmup=False), rec


def expected_bin(x: float) -> int:
    if x < -1.0:
        return -1
    return min(255, math.floor((x + 1.0) * 128))


def run(rt: StagedVLARuntime, state: np.ndarray, text: str) -> None:
    images = {c: np.zeros((1, 3, HW, HW), np.float32) for c in ("front", "wrist")}
    zeros = np.zeros((1, H, D), np.float32)
    rt.infer(images, state[None], rt.encode_instruction(text)[None], zeros, 0, zeros, np.zeros((H, D), np.float32))


@pytest.mark.parametrize("normalised", [[-0.3, 0.61, 0.02], [-1.7, 1.0, 0.999], [2.5, -0.999, -1.0]])
def test_the_prefix_gets_the_prompt_with_the_normalised_states_bins(bundle: Path, normalised: list[float]) -> None:
    rt, rec = open_runtime(bundle)
    state = np.asarray(normalised, np.float32) * DIV + SUB
    run(rt, state, "  go_left\n")
    bins = " ".join(str(expected_bin(float(v))) for v in (state - SUB) / DIV)
    want = Tokenizer.from_file(str(bundle / "tokenizer.json")).encode(f"Task: go left, State: {bins};\nAction: ").ids
    tokens, mask = rec.prefix_inputs[-1][1][0], rec.prefix_inputs[-1][2][0]
    assert tokens[: len(want)].tolist() == want and not tokens[len(want):].any()
    assert mask.tolist() == [1.0] * len(want) + [0.0] * (L - len(want))


def test_a_new_state_gives_new_tokens_under_the_same_instruction_vector(bundle: Path) -> None:
    rt, rec = open_runtime(bundle)
    vec = rt.encode_instruction("go")[None]
    images = {c: np.zeros((1, 3, HW, HW), np.float32) for c in ("front", "wrist")}
    zeros, out = np.zeros((1, H, D), np.float32), np.zeros((H, D), np.float32)
    for s in (SUB, SUB + 0.5 * DIV):
        rt.infer(images, s[None], vec, zeros, 0, zeros, out)
    assert rec.prefix_inputs[0][1].tolist() != rec.prefix_inputs[1][1].tolist()


def test_the_instruction_vector_carries_the_text_to_another_runtime(bundle: Path) -> None:
    """What the inference worker relies on: the vector alone names the instruction (no state kept by the runtime)."""
    a, _ = open_runtime(bundle)
    b, rec = open_runtime(bundle)
    images = {c: np.zeros((1, 3, HW, HW), np.float32) for c in ("front", "wrist")}
    zeros = np.zeros((1, H, D), np.float32)
    b.infer(images, SUB[None], a.encode_instruction("go left")[None], zeros, 0, zeros, np.zeros((H, D), np.float32))
    assert rec.prefix_inputs[-1][1][0].tolist()[:4] == [2, WORDS.index("Task"), WORDS.index(":"), WORDS.index("go")]


def test_an_instruction_too_long_for_the_vector_is_refused_naming_the_limit(bundle: Path) -> None:
    rt, _ = open_runtime(bundle)
    with pytest.raises(KeyError, match=str(2 * L - 1)):
        rt.encode_instruction("go " * L)


@pytest.mark.parametrize("state_joints", [[f"j{i}" for i in range(D)][::-1], [f"j{i}" for i in range(D - 1)]])
def test_state_joints_other_than_the_actions_are_refused(bundle: Path, state_joints: list[str]) -> None:
    """The loop feeds the measured positions of the action's joints: a reordered or shorter state would be wrong."""
    m = manifest(bundle, {})
    lang = {"tokenizer": "toy", "max_tokens": L, "tokenizer_file": artifact_spec(bundle, "tokenizer.json").model_dump(),
            "state_prompt": {"template": TEMPLATE}}
    state = {"joint_names": state_joints, "units": ["rad"] * len(state_joints)}
    with pytest.raises(ValidationError, match="state.joint_names .* must be action.joint_names"):
        VLAManifest.model_validate({**m, "language": lang, "state": state})


@pytest.mark.parametrize("change, why", [
    (lambda lang: {**lang, "state_prompt": {"template": "Task: {task};"}}, "must contain"),
    (lambda lang: {k: v for k, v in lang.items() if k != "tokenizer_file"} | {"table": {"go": [1]}}, "tokenizer_file"),
    (lambda lang: {**lang, "prompt_suffix": "\n"}, "prompt_suffix"),
])
def test_a_state_prompt_the_runtime_could_not_follow_is_refused(bundle: Path, change, why: str) -> None:  # noqa: ANN001
    m = manifest(bundle, {})
    lang = {"tokenizer": "toy", "max_tokens": L, "tokenizer_file": artifact_spec(bundle, "tokenizer.json").model_dump(),
            "state_prompt": {"template": TEMPLATE}}
    with pytest.raises(ValidationError, match=why):
        VLAManifest.model_validate({**m, "language": change(lang)})
