"""The eval report as a user opens it: every shown column filled, the pictures show something, settings readable."""
from __future__ import annotations

from pathlib import Path

import pytest

from omni_vla_sim.eval import main
from report_reader import open_report, picture_shows_something

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_eval_report_shows_every_measured_column_its_pictures_and_its_settings(tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert main(["--backend", "mnn", "--bundle", str(REPO / "bundles" / "reference"), "--tasks", "touch_yellow",
                 "pick_red", "--episodes", "1", "--videos", "1", "--workers", "1", "--out", str(out)]) == 0
    report = open_report(out / "report.md")
    assert set(report.rows) == {"touch_yellow", "pick_red", "**overall**"}
    for task, row in report.rows.items():
        assert {"success", "95% CI", "shaping/ep", "clamps/ep", "jerk mean", "boundary jump",
                "latency p50/p99 ms"} <= set(row), row
        empty = [column for column, cell in row.items() if cell in ("", "-", "nan")]
        assert not empty, f"{task}: {empty} shown but not filled"
    p50, p99 = (float(v) for v in report.rows["**overall**"]["latency p50/p99 ms"].split("/"))
    assert 0 < p50 <= p99, "MNN's inference time was measured"
    assert {"success", "interventions", "latency"} <= set(report.pictures)
    frames = [name for name in report.pictures if name.startswith("frames")]
    assert len(frames) == 2, "one picture of rollout frames per task's video"
    for name, picture in report.pictures.items():
        assert picture.is_file() and picture_shows_something(picture), name
    assert report.settings["backend"] == "mnn" and report.settings["episodes"] == "1"
    assert report.settings["tasks"] == '["touch_yellow", "pick_red"]' or "touch_yellow" in report.settings["tasks"]
