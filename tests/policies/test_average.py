"""`omni-vla average` (policies/average.py): weight means of one checkpoint lineage, refusals by name."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from omni_vla_policies.average import average_checkpoints, main
from omni_vla_policies.export import load_checkpoint, policy_from_checkpoint, save_checkpoint
from fixtures_policy import make_tiny_checkpoint


def _lineage(tmp_path: Path, n: int = 2) -> list[Path]:
    """n tiny checkpoints that differ only in their weights (as fine-tuning rounds do)."""
    base = make_tiny_checkpoint(seed=0)
    paths = []
    for i in range(n):
        ckpt = dict(make_tiny_checkpoint(seed=i), instruction_embeddings=base["instruction_embeddings"], steps=100 * (i + 1))
        paths.append(tmp_path / f"round{i}.pt")
        save_checkpoint(ckpt, paths[-1])
    return paths


def test_average_is_the_weighted_mean_of_every_floating_point_weight(tmp_path: Path) -> None:
    paths = _lineage(tmp_path)
    a, b = (load_checkpoint(p)["state_dict"] for p in paths)
    out = average_checkpoints(paths, [1.0, 3.0])
    changed = 0
    for name, value in out["state_dict"].items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.25 * a[name] + 0.75 * b[name], rtol=1e-6, atol=1e-7)
            changed += int(not torch.equal(a[name], b[name]))
        else:
            assert torch.equal(value, b[name])
    assert changed > 10  # the two rounds really differ, so the mean is not one of them
    assert [s["weight"] for s in out["averaged_from"]] == [0.25, 0.75]
    assert [s["sha256"] for s in out["averaged_from"]] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert out["steps"] == 300
    policy_from_checkpoint(out)  # loads strictly into the architecture it claims


def test_checkpoints_with_other_statistics_or_instructions_are_refused_by_name(tmp_path: Path) -> None:
    paths = _lineage(tmp_path)
    other = load_checkpoint(paths[0])
    other["normalization"] = dict(other["normalization"], state_std=[0.5] * 8)
    save_checkpoint(other, tmp_path / "other_stats.pt")
    with pytest.raises(ValueError, match="other_stats.pt: normalization differs"):
        average_checkpoints([tmp_path / "other_stats.pt", paths[1]])
    foreign = make_tiny_checkpoint(seed=5)  # its own random instruction embeddings
    save_checkpoint(foreign, tmp_path / "foreign.pt")
    with pytest.raises(ValueError, match="foreign.pt: instruction_embeddings differ"):
        average_checkpoints([tmp_path / "foreign.pt", paths[1]])
    with pytest.raises(ValueError, match="at least two"):
        average_checkpoints(paths[:1])
    with pytest.raises(ValueError, match="one non-negative weight per checkpoint"):
        average_checkpoints(paths, [1.0])


def test_cli_writes_the_average_and_refuses_a_missing_checkpoint(tmp_path: Path, capsys) -> None:
    paths = _lineage(tmp_path, 3)
    out = tmp_path / "soup" / "policy.pt"
    assert main([*map(str, paths), "--out", str(out)]) == 0
    soup = load_checkpoint(out)
    assert [s["path"] for s in soup["averaged_from"]] == [str(p) for p in paths]
    assert "mean of 3 checkpoints" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="nope.pt: no such checkpoint"):
        main([str(paths[0]), str(tmp_path / "nope.pt"), "--out", str(tmp_path / "x.pt")])
    assert not (tmp_path / "x.pt").exists()
