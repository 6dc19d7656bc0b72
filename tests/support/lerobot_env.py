"""LeRobot in its own virtual environment, built once per requirements file (a test fixture, like a dataset).

The project never imports LeRobot; tests run LeRobot's own code in this interpreter through
tests/support/lerobot_reference.py and compare saved outputs.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from built_once import built_once

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "lerobot_requirements.txt"
PI0_REQUIREMENTS = HERE / "pi0_requirements.txt"
PYTHON312 = Path(os.environ.get("OMNI_VLA_PYTHON312", "/root/.pyenv/versions/3.12.1/bin/python3.12"))
REFERENCE = HERE / "lerobot_reference.py"
CACHE = Path(os.environ.get("OMNI_VLA_CACHE", Path.home() / ".cache" / "omni_vla"))
_SCRATCH: list[str] = []


def lerobot_env(**extra: str) -> dict[str, str]:
    """The environment LeRobot's processes run in. Its config loader writes each config.json it reads to a
    temporary file it never deletes (NamedTemporaryFile(delete=False)): TMPDIR is a directory of this process's own,
    removed when it exits, so test runs leave nothing behind in /tmp."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="omni_vla_lerobot_tmp_"))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return {**os.environ, "PYTHONWARNINGS": "ignore", "TMPDIR": _SCRATCH[0], **extra}


def _pip(python: Path, *args: str) -> None:
    out = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(args)} failed in LeRobot's venv:\n{out.stderr[-3000:]}")


def lerobot_python(requirements: Path = REQUIREMENTS, prefix: str = "lerobot", base: Path | None = None) -> Path:
    """The interpreter of LeRobot's venv (ACT and SmolVLA by default), building it (minutes, once) when the requirements
    changed; `base`: the interpreter the venv is made from (default: this one)."""
    text = requirements.read_text()
    key = hashlib.sha256(text.encode()).hexdigest()[:16]

    def build(venv: Path) -> None:
        python = venv / "bin" / "python"
        subprocess.run([str(base or sys.executable), "-m", "venv", str(venv)], check=True)
        lines = [ln.split("#")[0].strip() for ln in text.splitlines()]
        pins = [ln for ln in lines if ln]
        torch_pins = [p for p in pins if p.startswith(("torch==", "torchvision=="))]
        no_deps = [p.replace("--no-deps", "").strip() for p in pins if "--no-deps" in p]
        rest = [p for p in pins if p not in torch_pins and "--no-deps" not in p]
        _pip(python, *torch_pins)
        if no_deps:
            _pip(python, "--no-deps", *no_deps)
        _pip(python, *rest)

    return built_once(CACHE / f"{prefix}-{key}", text, build) / "bin" / "python"


def pi0_python() -> Path:
    """LeRobot 0.6.1 with its pi extra on Python 3.12 (what its pi0 / pi0.5 need), a venv of its own."""
    if not PYTHON312.is_file():
        raise RuntimeError(f"{PYTHON312} is missing: LeRobot 0.6.1 needs Python 3.12 (set OMNI_VLA_PYTHON312)")
    return lerobot_python(PI0_REQUIREMENTS, "pi0", PYTHON312)


# What lerobot_server.py needs besides LeRobot: openpi-client's codec (upstream's own msgpack_numpy; its numpy<2
# pin is for its client, which the server does not use) and the websocket server, beside LeRobot's venv so that
# venv's pins stay untouched.
SERVER_WIRE = ("openpi-client==0.1.2", "msgpack==1.2.4", "websockets==17.4")
SERVER = HERE / "lerobot_server.py"


def served_env(python: Path) -> dict[str, str]:
    """The environment lerobot_server.py runs in with `python` (a LeRobot venv): the wire packages on its path,
    installed once from PyPI into a directory keyed by their pins and that interpreter."""
    key = hashlib.sha256(" ".join((str(python), *SERVER_WIRE)).encode()).hexdigest()[:16]
    target = built_once(CACHE / f"lerobot-wire-{key}", "\n".join(SERVER_WIRE),
                        lambda d: _pip(python, "--no-deps", "--target", str(d), *SERVER_WIRE))
    return lerobot_env(PYTHONPATH=str(target), OMP_NUM_THREADS="1")


@contextlib.contextmanager
def served_policy(checkpoint: Path, python: Path | None = None, timeout: float = 300.0) -> Iterator[str]:
    """lerobot_server.py serving `checkpoint` on loopback (LeRobot's venv by default): yields its ws:// URL."""
    python = python or lerobot_python()
    env = served_env(python)
    with tempfile.TemporaryDirectory(prefix="lerobot_served_") as tmp:
        port_file, log = Path(tmp) / "port", Path(tmp) / "server.log"
        with open(log, "w") as sink:
            proc = subprocess.Popen([str(python), str(SERVER), str(checkpoint), str(port_file)], stdout=sink,
                                    stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + timeout
            while not port_file.is_file():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"LeRobot's server did not come up:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
            yield f"ws://127.0.0.1:{port_file.read_text()}"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_reference(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """tests/support/lerobot_reference.py in LeRobot's venv; raises with its stderr on failure."""
    out = subprocess.run([str(lerobot_python()), str(REFERENCE), *args], capture_output=True, text=True,
                         timeout=timeout, env=lerobot_env())
    if out.returncode != 0:
        raise RuntimeError(f"LeRobot reference {args[0]} failed:\n{out.stderr[-3000:]}")
    return out


def lerobot_checkpoint(root: Path, spec: dict) -> Path:
    """What `lerobot-train` writes as pretrained_model/, made by LeRobot's own save_pretrained calls from `spec`
    (see lerobot_reference.py make_checkpoint)."""
    (root / "spec.json").write_text(json.dumps(spec))
    run_reference("checkpoint", str(root / "pretrained_model"), str(root / "spec.json"))
    return root / "pretrained_model"


PANDA_JOINTS = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]
SMOLVLA_CHECKPOINT = HERE / "smolvla_checkpoint.py"
SMOLVLA_TASK = "pick up the red block"
SMOLVLA_CAMERAS = {"front": [3, 48, 80], "wrist": [3, 48, 80]}  # wider than tall: resized with padding to 64


TEST_WORDS = tuple("pick up the red block put green cube on stack push left right".split())


def write_tokenizer(directory: Path, words: tuple[str, ...] = TEST_WORDS) -> None:
    """A word-level tokenizer made with the `tokenizers` library (no hub here): a BOS added by its post-processor
    and the newline as its own token, so a missing prompt suffix or special token changes the ids."""
    vocab = {"<pad>": 0, "<unk>": 1, "<bos>": 2, "\n": 3, **{w: i + 4 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "removed"),
                                                 pre_tokenizers.Split("\n", "isolated")])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>",
        "bos_token": "<bos>", "model_max_length": 512}))


def write_smolvla_vlm(directory: Path, words: tuple[str, ...] = TEST_WORDS) -> Path:
    """A SmolVLM directory at test size (config.json of smolvla_config.tiny, a word-level tokenizer of `words`):
    what SmolVLAConfig.vlm_model_name names when no hub is reachable."""
    from omni_vla_policies.vla.smolvla_config import tiny  # torch: the 3.11 suite only

    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(tiny().vlm_config()))
    write_tokenizer(directory, words)
    return directory


def lerobot_smolvla(root: Path, tokenizer_max_length: int = 8) -> Path:
    """root/vlm (config + tokenizer), root/ref/pretrained_model and root/ref/io.npz from LeRobot's own code."""
    from omni_vla_policies.vla.smolvla_config import tiny  # torch: the 3.11 suite only

    arch = tiny()
    vlm = write_smolvla_vlm(root / "vlm")
    fields = {"num_vlm_layers": arch.num_vlm_layers, "chunk_size": arch.chunk_size, "n_action_steps": arch.chunk_size,
              "num_steps": arch.num_steps, "max_state_dim": arch.max_state_dim, "max_action_dim": arch.max_action_dim,
              "tokenizer_max_length": tokenizer_max_length, "resize_imgs_with_padding": [64, 64]}
    spec = {"vlm_dir": str(vlm), "smolvla": fields, "cameras": SMOLVLA_CAMERAS, "state_dim": len(PANDA_JOINTS),
            "action_dim": len(PANDA_JOINTS), "seed": 3, "task": SMOLVLA_TASK}
    (root / "spec.json").write_text(json.dumps(spec))
    out = subprocess.run([str(lerobot_python()), str(SMOLVLA_CHECKPOINT), str(root / "ref"), str(root / "spec.json")],
                         capture_output=True, text=True, timeout=900, env=lerobot_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return root / "ref"




PI0_TASK = "pick up the red block"
PI0_CAMERAS = {"front": [3, 48, 64], "wrist": [3, 48, 64]}  # wider than tall: resized with centred padding to 28
PI0_CHECKPOINT = HERE / "pi0_checkpoint.py"
# Test size: LeRobot's own Gemma / SigLIP classes at a few dozen widths (8 query heads and 1 KV head as in every
# pi0 variant; SigLIP heads of 72 as in So400m), 28 px images (2 x 2 patches of 14).
PI0_SIZES = {"vlm": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 8},
             "expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 8},
             "vision": {"hidden_size": 144, "num_hidden_layers": 2, "num_attention_heads": 2, "patch_size": 14}}


def write_pi0_tokenizer(directory: Path) -> None:
    """A word-level stand-in for PaliGemma's tokenizer: BOS added, punctuation and the newline as tokens of their
    own, the words of the tasks, pi0.5's prompt words and its 256 state bins (and the -1 below them)."""
    words = ["<pad>", "<unk>", "<bos>", "<eos>", "\n", ":", ",", ";", "-", "Task", "State", "Action",
             *"pick up the red block put green cube on stack push left right".split(), *map(str, range(256))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(" ", "removed"),
                                                 pre_tokenizers.Split("\n", "isolated"),
                                                 pre_tokenizers.Punctuation("isolated")])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "unk_token": "<unk>",
        "bos_token": "<bos>", "eos_token": "<eos>", "model_max_length": 512}))


def lerobot_pi0(root: Path, policy: str) -> Path:
    """root/tokenizer, root/ref/pretrained_model and root/ref/io.npz from LeRobot 0.6.1's own pi0 / pi05 code."""
    write_pi0_tokenizer(root / "tokenizer")
    fields = {"chunk_size": 8, "n_action_steps": 8, "num_inference_steps": 3, "image_resolution": [28, 28],
              "tokenizer_max_length": 24 if policy == "pi0" else 40, "max_state_dim": 16, "max_action_dim": 16}
    spec = {"policy": policy, "tokenizer_dir": str(root / "tokenizer"), "fields": fields, **PI0_SIZES,
            "cameras": PI0_CAMERAS, "state_dim": len(PANDA_JOINTS), "action_dim": len(PANDA_JOINTS), "seed": 3,
            "task": PI0_TASK}
    (root / "spec.json").write_text(json.dumps(spec))
    out = subprocess.run([str(pi0_python()), str(PI0_CHECKPOINT), str(root / "ref"), str(root / "spec.json")],
                         capture_output=True, text=True, timeout=900, env=lerobot_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return root / "ref"


def imported_smolvla(root: Path, rate_hz: float = 10.0) -> Path:
    """A SmolVLA checkpoint LeRobot wrote (lerobot_smolvla, test size), imported for the Panda on MNN (root/bundle)."""
    from omni_vla_policies.lerobot_smolvla import import_smolvla

    ref = lerobot_smolvla(root)
    import_smolvla(ref / "pretrained_model", root / "bundle", PANDA_JOINTS, rate_hz, gripper=PANDA_JOINTS[-1],
                   backends=("mnn",))
    return root / "bundle"


def imported_act(root: Path, spec: dict, rate_hz: float = 20.0, table: dict[str, list[float]] | None = None) -> Path:
    """A LeRobot-written ACT checkpoint from `spec`, imported as an MNN bundle for the Panda (root/bundle).

    `table`: instruction -> conditioning vector for a checkpoint with an environment_state input; by default every
    phrasing of the sim's tasks, one-hot over them (as `omni-vla dataset lerobot` writes it)."""
    from omni_vla_policies.lerobot_import import import_act

    checkpoint = lerobot_checkpoint(root, spec)
    instructions = None
    if spec.get("env_dim"):
        from omni_vla_sim.tasks import TASKS

        if table is None:
            table = {i.text: [float(k == j) for j in range(len(TASKS))]
                     for k, t in enumerate(TASKS.values()) for i in t.instructions}
        instructions = root / "instructions.json"
        instructions.write_text(json.dumps({"names": list(TASKS), "table": table}))
    import_act(checkpoint, root / "bundle", PANDA_JOINTS, rate_hz, gripper="panda_finger_joint1", backends=("mnn",),
               instructions=instructions)
    return root / "bundle"
