"""The int8 export runs in a process of its own (a full-size pi0 cannot hold its float build twice); what goes wrong
there reaches the importer as one line naming it, and a killed export is said to be one."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from torch import nn

from omni_vla_policies.lerobot_checkpoint import CheckpointError
from omni_vla_policies.vla.imported import export_apart


def refuses() -> nn.Module:
    raise ValueError("model.safetensors has no tensor 'x'\nsecond line")


def killed() -> nn.Module:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def test_an_export_that_raises_is_one_line_naming_the_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as err:
        export_apart(refuses, tmp_path, ("executorch",))
    assert str(err.value) == "the int8 export failed: ValueError: model.safetensors has no tensor 'x'"


def test_an_export_killed_by_the_kernel_says_so(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"killed by signal 9: out of memory\?\)"):
        export_apart(killed, tmp_path, ("executorch",))
