"""Bundle format 3, kind "vla": a flow-matching VLA exported stage by stage (SmolVLA-, pi0-like), described by its
manifest alone.

Four programs, chained by runtime/vla.py: `vision` once per camera (image -> image tokens), `prefix` once (every
camera's tokens + language tokens + padded state -> the backbone's KV cache, two tensors), `step` num_steps times
(one Euler step of the action expert attending to the cache), `finish` once (the padded chunk -> the robot's
action dimensions). The manifest says what the loop needs around them: cameras, state and action joints, the
normalisation applied in numpy on each side, the padded widths, and the language: token ids per instruction from
the tokenizer that made them (an instruction not in the table is refused, never guessed), or the model's own
tokenizer (a `tokenizers` JSON in the bundle) that the runtime runs on any instruction. docs/bundle_format.md
is the prose of this schema.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from omni_vla.runtime.bundle import ArtifactSpec
from omni_vla.runtime.chunk_manifest import AffineSpec, ChunkStageSpec, Format3Manifest, check_affine

VLA_KIND = "vla"
VLA_STAGES = ("vision", "prefix", "step", "finish")
STAGE_INPUTS = {"vision": ("image",), "prefix": ("image_tokens", "lang_tokens", "lang_mask", "state"),
                "step": ("x_t", "time", "keys", "values", "lang_mask"), "finish": ("x",)}
STAGE_OUTPUTS = {"vision": ("image_tokens",), "prefix": ("keys", "values"), "step": ("x_next",), "finish": ("actions",)}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StatePromptSpec(_Strict):
    """pi0.5: the state is written into the prompt each tick. The normalised state's elements become bins of
    [-1, 1] (np.digitize on `bins` equal steps, minus 1: below -1 gives -1, 1 and above give bins - 1), joined by
    spaces as `{state}`; the instruction, stripped with '_' and newlines as spaces, is `{task}`."""

    template: str = Field(description="the whole prompt, e.g. 'Task: {task}, State: {state};\\nAction: '")
    bins: int = Field(256, ge=2, description="equal bins over [-1, 1]")

    @model_validator(mode="after")
    def _has_fields(self) -> "StatePromptSpec":
        if "{task}" not in self.template or "{state}" not in self.template:
            raise ValueError("state_prompt.template must contain {task} and {state}")
        return self


class LanguageSpec(_Strict):
    """How an instruction becomes the prefix's token ids: the model's own tokenizer shipped in the bundle (run on
    the robot with `tokenizers`), or a fixed table of instructions for bundles without one."""

    tokenizer: str = Field(description="what makes the ids (the model's tokenizer, or what made the table)")
    max_tokens: int = Field(ge=1, description="the prefix stage's language length; ids are padded to it, masked")
    table: dict[str, list[int]] = Field(default_factory=dict, description="instruction text -> token ids (unpadded)")
    tokenizer_file: ArtifactSpec | None = Field(None, description="a `tokenizers` JSON; when set, any text is tokenised")
    prompt_suffix: str = Field("", description="appended to the instruction before tokenising (SmolVLA: a newline)")
    state_prompt: StatePromptSpec | None = Field(None, description="the state tokenised into the prompt each tick "
                                                 "(pi0.5); needs tokenizer_file")

    @model_validator(mode="after")
    def _has_a_source(self) -> "LanguageSpec":
        if not self.table and self.tokenizer_file is None:
            raise ValueError("language needs a tokenizer_file or a non-empty table")
        if self.state_prompt is not None and (self.tokenizer_file is None or self.prompt_suffix):
            raise ValueError("language.state_prompt needs a tokenizer_file and no prompt_suffix (the template is "
                             "the whole prompt)")
        return self


class FlowSpec(_Strict):
    num_steps: int = Field(ge=1, description="Euler steps from time 1 (noise) to 0 (actions), dt = -1/num_steps")
    padded_state_dim: int = Field(ge=1, description="the state is zero-padded to this width after normalisation")
    padded_action_dim: int = Field(ge=1, description="the flow runs at this width; the columns beyond the robot's start at 0")
    max_prefix: int = Field(ge=0, description="committed actions real-time chunking may pin (inpainted each step)")


class VLAManifest(Format3Manifest):
    kind: Literal["vla"]
    normalization: dict[str, AffineSpec] = Field(description="'state' and 'action': normalised = (raw - subtract) / divide")
    language: LanguageSpec
    flow: FlowSpec
    stages: dict[str, ChunkStageSpec]

    def shapes(self, stage: str) -> list[tuple[int, ...]]:
        return [t.shape for t in self.stages[stage].inputs]

    @model_validator(mode="after")
    def _consistent(self) -> "VLAManifest":
        self._check_robot_side()
        if len({(c.height, c.width) for c in self.cameras}) != 1:
            raise ValueError("every camera must have the vision stage's resolution (one vision program serves all)")
        a, f, lang = self.action, self.flow, self.language
        if f.max_prefix >= a.chunk_length:
            raise ValueError(f"flow.max_prefix {f.max_prefix} must be < chunk_length {a.chunk_length}")
        s, d = len(self.state.joint_names), len(a.joint_names)
        if s > f.padded_state_dim or d > f.padded_action_dim:
            raise ValueError(f"state {s} / action {d} joints exceed the padded widths {f.padded_state_dim} / "
                             f"{f.padded_action_dim}")
        bad = {t: len(ids) for t, ids in lang.table.items() if not 1 <= len(ids) <= lang.max_tokens}
        if bad:
            raise ValueError(f"language.table entries must have 1..{lang.max_tokens} token ids, got {bad}")
        if any(i < 0 for ids in lang.table.values() for i in ids):
            raise ValueError("language.table token ids must be >= 0")
        if set(self.normalization) != {"state", "action"}:
            raise ValueError(f"normalization keys {sorted(self.normalization)}, expected ['action', 'state']")
        for key, n in (("state", s), ("action", d)):
            check_affine(key, self.normalization[key], n)
        self._check_stages()
        return self

    def _check_stages(self) -> None:
        if set(self.stages) != set(VLA_STAGES):
            raise ValueError(f"stages {sorted(self.stages)}, expected {list(VLA_STAGES)}")
        for stage in VLA_STAGES:
            spec = self.stages[stage]
            got_in, got_out = tuple(t.name for t in spec.inputs), tuple(t.name for t in spec.outputs)
            if (got_in, got_out) != (STAGE_INPUTS[stage], STAGE_OUTPUTS[stage]):
                raise ValueError(f"stage {stage}: {list(got_in)} -> {list(got_out)}, expected "
                                 f"{list(STAGE_INPUTS[stage])} -> {list(STAGE_OUTPUTS[stage])}")
        cam, h, f, n = self.cameras[0], self.action.chunk_length, self.flow, self.language.max_tokens
        tokens = self.stages["vision"].outputs[0].shape
        kv = [t.shape for t in self.stages["prefix"].outputs]
        x = (1, h, f.padded_action_dim)
        want = {
            "vision": [(1, 3, cam.height, cam.width)],
            "prefix": [(len(self.cameras), *tokens[1:]), (1, n), (1, n), (1, f.padded_state_dim)],
            "step": [x, (1,), kv[0], kv[0], (1, n)],
            "finish": [x],
        }
        for stage, shapes in want.items():
            if self.shapes(stage) != shapes:
                raise ValueError(f"stage {stage} input shapes {self.shapes(stage)}, expected {shapes}")
        if len(tokens) != 3 or tokens[0] != 1 or kv[0] != kv[1]:
            raise ValueError(f"vision output {tokens} must be [1, T, W]; prefix keys {kv[0]} and values {kv[1]} alike")
        if [t.shape for t in self.stages["step"].outputs] != [x]:
            raise ValueError(f"step output must be one {x} tensor")
        if [t.shape for t in self.stages["finish"].outputs] != [(1, h, len(self.action.joint_names))]:
            raise ValueError(f"finish output must be one [1, {h}, {len(self.action.joint_names)}] tensor")
        dtypes = {t.name: t.dtype for st in self.stages.values() for t in st.inputs}
        if dtypes["lang_tokens"] != "int32" or any(v != "float32" for k, v in dtypes.items() if k != "lang_tokens"):
            raise ValueError("lang_tokens must be int32 and every other input float32")
