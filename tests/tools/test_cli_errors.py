"""`omni-vla <verb>` with a bad input: one stderr line naming what was wrong and what was expected, exit code 2,
no traceback (unless --debug), nothing left behind. A bug (an unexpected exception) says so, exit code 1."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from omni_vla.tools.cli import main as cli, run_guarded

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundles" / "reference"


def refusal(capfd: pytest.CaptureFixture, *argv: str) -> str:
    """Run `omni-vla argv` in this process; assert exit 2, one stderr line, no traceback; return the line."""
    code = cli(list(argv))
    out, err = capfd.readouterr()
    lines = err.splitlines()
    assert code == 2, f"exit {code}; stderr: {err}"
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    assert "Traceback" not in err and "errors.pydantic.dev" not in err
    assert lines[0].startswith(f"omni-vla {argv[0] if argv[0] != 'bench' else 'bench ' + argv[1]}: ")
    return lines[0]


@pytest.mark.parametrize("argv, named", [
    (("collect", "--episodes", "-3"), ["--episodes", "positive integer", "-3"]),
    (("collect", "--workers", "0"), ["--workers", "positive integer", "0"]),
    (("collect", "--tasks", "juggle"), ["--tasks", "'juggle'", "pick_red"]),
    (("demo", "--episodes", "-1"), ["--episodes", "positive integer", "-1"]),
    (("demo", "--tasks", "juggle"), ["--tasks", "'juggle'"]),
    (("demo", "--bundle", "/nonexistent"), ["--bundle", "/nonexistent", "no such directory", "policy bundle"]),
    (("eval", "--episodes", "0"), ["--episodes", "positive integer"]),
    (("eval", "--backend", "expert", "--tasks", "juggle"), ["unknown task 'juggle'", "pick_red"]),
    (("eval", "--delay", "99"), ["delay_ticks: must be <= 8 (got 99)"]),
    (("eval", "--bundle", "/nonexistent"), ["/nonexistent", "manifest"]),
    (("export", "--checkpoint", "/nonexistent.pt", "--out", "x"), ["--checkpoint", "/nonexistent.pt", "no such file"]),
    (("export", "--text-encoder", "/nonexistent"), ["--text-encoder", "/nonexistent", "policy bundle"]),
    (("parity", "--bundle", "/nonexistent"), ["--bundle", "/nonexistent", "policy bundle"]),
    (("parity", "--bundle", str(BUNDLE), "--n", "-2"), ["--n", "positive integer", "-2"]),
    (("average", "/nonexistent.pt", "/other.pt", "--out", "x.pt"), ["/nonexistent.pt", "no such checkpoint"]),
    (("serve-openpi", "--policy", "bundle", "--bundle-dir", "/nonexistent"), ["--bundle-dir", "/nonexistent"]),
    (("serve-openpi", "--port", "70000"), ["--port", "0..65535", "70000"]),
    (("serve-openpi", "--joint-limits", "/nonexistent.yaml"), ["--joint-limits", "/nonexistent.yaml", "no such file"]),
    (("bench", "runtime", "--bundle", "/nonexistent"), ["--bundle", "/nonexistent", "policy bundle"]),
    (("bench", "runtime", "--bundle", str(BUNDLE), "--backends", "tensorflow"), ["'tensorflow'", "mnn"]),
    (("bench", "runtime", "--bundle", str(BUNDLE), "--threads", "1,0"), ["--threads", "positive integer"]),
    (("bench", "loop", "--ticks", "-5"), ["--ticks", "positive integer", "-5"]),
    (("bench", "loop", "--rates", "50,0"), ["--rates", "'50,0'", "Hz > 0"]),
    (("bench", "loop", "--bundle", "/nonexistent"), ["/nonexistent"]),
    (("bench", "sim", "--seeds", "0"), ["--seeds", "positive integer"]),
    (("bench", "graph", "--bundle", "/nonexistent"), ["--bundle", "/nonexistent", "policy bundle"]),
    (("bench", "graph", "--duration", "-1"), ["--duration", "> 0", "-1"]),
    (("bench", "safety", "--limits", "/nonexistent.yaml"), ["/nonexistent.yaml"]),
    (("limits", "/nonexistent.urdf"), ["/nonexistent.urdf"]),
    (("eval", "--no-such-flag"), ["unrecognized arguments: --no-such-flag"]),
])
def test_a_bad_input_is_one_line_naming_it_and_exit_code_2(capfd, argv, named):
    line = refusal(capfd, *argv)
    for text in named:
        assert text in line, f"{text!r} not in {line!r}"


def test_eval_execution_horizon_longer_than_the_chunk_is_refused_before_any_worker(capfd, tmp_path):
    line = refusal(capfd, "eval", "--execution-horizon", "99", "--episodes", "1", "--workers", "1",
                   "--out", str(tmp_path / "report"))
    assert "execution horizon 99" in line and "chunk length 16" in line
    assert not (tmp_path / "report").exists()


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """A real (tiny) dataset: two scripted-expert episodes, as `omni-vla collect` writes them."""
    out = tmp_path_factory.mktemp("demos")
    assert cli(["collect", "--out", str(out), "--tasks", "touch_yellow", "--episodes", "1", "--workers", "1",
                "--image-size", "32"]) == 0
    return out


def test_train_with_a_typo_in_a_config_key_names_the_key_and_the_setting_meant(capfd, tmp_path, demos):
    cfg = tmp_path / "policy.yaml"
    cfg.write_text("max_step: 10\nbatch_size: 8\n")
    line = refusal(capfd, "train", "--config", str(cfg), "--dataset", str(demos), "--out", str(tmp_path / "r/p.pt"))
    assert line == f"omni-vla train: {cfg}: max_step: unknown key (did you mean max_steps?)"
    cfg.write_text("batch_size: 0\n")
    line = refusal(capfd, "train", "--config", str(cfg), "--dataset", str(demos))
    assert line == f"omni-vla train: {cfg}: batch_size: must be >= 1 (got 0)"
    cfg.write_text("batch_size: [1\n")
    assert "not valid YAML at line 2" in refusal(capfd, "train", "--config", str(cfg))
    assert not (tmp_path / "r").exists()


def test_failed_train_leaves_no_output_folder(capfd, tmp_path):
    empty = tmp_path / "empty_dataset"
    empty.mkdir()
    out = tmp_path / "runs" / "new" / "policy.pt"
    line = refusal(capfd, "train", "--dataset", str(empty), "--out", str(out), "--embeddings", "random",
                   "--max-steps", "1")
    assert "empty_dataset" in line
    assert not (tmp_path / "runs").exists(), "the folders made for the checkpoint must go when training fails"


def test_train_refuses_a_folder_as_out_and_missing_paths(capfd, tmp_path, demos):
    assert "expected a checkpoint file path" in refusal(capfd, "train", "--dataset", str(demos), "--out", str(tmp_path))
    assert "--dataset: /nonexistent: no such directory" in refusal(capfd, "train", "--dataset", "/nonexistent")
    assert "--config: /nonexistent.yaml: no such file" in refusal(capfd, "train", "--config", "/nonexistent.yaml")


def test_export_of_a_file_that_is_not_a_checkpoint_names_it_and_writes_nothing(capfd, tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    line = refusal(capfd, "export", "--checkpoint", str(junk), "--out", str(tmp_path / "out" / "bundle"))
    assert f"{junk}: not an omni_vla policy checkpoint" in line
    assert not (tmp_path / "out").exists()


def test_a_bug_is_an_internal_error_with_exit_1_and_debug_shows_the_traceback(capfd):
    def buggy(argv: list[str]) -> int:
        return {}["missing"]

    assert run_guarded("omni-vla x", buggy, [], debug=False) == 1
    err = capfd.readouterr().err
    assert err == "omni-vla x: internal error (a bug; rerun with --debug for the traceback): KeyError: 'missing'\n"
    assert run_guarded("omni-vla x", buggy, [], debug=True) == 1
    err = capfd.readouterr().err
    assert "Traceback" in err and "return {}[\"missing\"]" in err and err.splitlines()[-1].startswith("omni-vla x: ")


def test_a_value_error_raised_inside_a_library_is_a_bug_not_a_user_error(capfd):
    import numpy as np

    def buggy(argv: list[str]) -> int:
        np.linspace(0, 1, num=-1)  # numpy's own ValueError: our code passed a bad value, the user did not
        return 0

    assert run_guarded("omni-vla x", buggy, [], debug=False) == 1
    assert "internal error" in capfd.readouterr().err


def test_console_script_prints_one_line_and_debug_prints_the_traceback():
    exe = Path(sys.executable).with_name("omni-vla")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "omni_vla.tools.cli"]
    plain = subprocess.run([*cmd, "collect", "--episodes", "-3"], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr == ("omni-vla collect: argument --episodes: must be a positive integer (got -3) "
                            "(see omni-vla collect --help)\n")
    debug = subprocess.run([*cmd, "--debug", "demo", "--bundle", "/nonexistent"], capture_output=True, text=True,
                           timeout=120)
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "UsageError" in debug.stderr
    assert debug.stderr.splitlines()[-1].startswith("omni-vla demo: argument --bundle: /nonexistent: no such directory")


def test_a_verb_whose_library_is_not_installed_says_which_and_where_to_get_it(capfd, monkeypatch):
    """The robot's environment has no torch: `omni-vla import` there is one line naming torch, not a traceback."""
    for name in [m for m in sys.modules if m.startswith("omni_vla_policies")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert cli(["import", "lerobot", "/nonexistent"]) == 3
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("omni-vla import: needs torch, which this Python")
    assert "make setup" in lines[0]
    with pytest.raises(ModuleNotFoundError):
        cli(["--debug", "import", "lerobot", "/nonexistent"])


def test_usage_text_documents_debug(capfd):
    assert cli(["--help"]) == 0
    assert "--debug" in capfd.readouterr().out


def test_serve_openpi_on_a_port_in_use_is_one_line(capfd):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refusal(capfd, "serve-openpi", "--port", str(port))
    assert f"--host 127.0.0.1 --port {port}: cannot listen there (address already in use)" in line
