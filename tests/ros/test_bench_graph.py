"""`omni-vla bench graph`: the real nodes over DDS with a fake robot; loose sanity only (timing goals are
met in the 60 s benchmark, not in a timed test on a shared machine)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_graph_reports_both_command_streams_and_the_supervisor_tick() -> None:
    if not (REPO / "bundles" / "reference" / "manifest.json").is_file():
        pytest.skip("no shipped bundle")
    proc = subprocess.run([sys.executable, "-m", "omni_vla.tools.cli", "bench", "graph", "--json", "--duration", "3",
                           "--warmup", "1", "--startup-timeout", "30"],
                          cwd=REPO, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("proposed_period_ms", "safe_period_ms"):
        assert set(result[key]) >= {"median", "p99", "max", "count"}
    # 3 s at 100 Hz and 20 Hz; generous floors for a loaded 2-core machine.
    assert result["safe_period_ms"]["count"] >= 200 and result["proposed_period_ms"]["count"] >= 40
    assert 5.0 < result["safe_period_ms"]["median"] < 20.0
    assert set(result["tick_lateness_ms"]) == {"p99", "max"} and result["tick_lateness_ms"]["p99"] is not None
    assert result["missed_ticks"] is not None and result["cold_start_s"] > 0
    window = result["in_window"]  # counted from the first diagnostics inside the window: never above the totals
    assert window["supervisor_missed_ticks"] is not None and 0 <= window["supervisor_missed_ticks"] <= result["missed_ticks"]
    assert 0 <= window["vla_missed_ticks"] <= result["vla_loop"]["missed_ticks"]
    assert 0 <= window["starved_ticks"] <= result["vla_loop"]["starved_ticks"]
    assert all(code in (0, -2) for code in result["exit_codes"].values()), result["exit_codes"]


@pytest.mark.parametrize("values, now, covered", [
    ({"tick_lateness_window_ticks": "1000", "rate_hz": "100"}, 25.0, True),  # the supervisor: 10 s ending at 25
    ({"tick_lateness_window_ticks": "1000", "rate_hz_target": "20"}, 25.0, False),  # vla_node: 50 s, before the window
    ({"tick_lateness_window_ticks": "1000", "rate_hz_target": "20"}, 70.0, True),
    ({"tick_lateness_window_ticks": "1000", "rate_hz": "100"}, 95.0, False),  # after the window's end
    ({"tick_lateness_window_ticks": "1000"}, 25.0, False),  # no rate: not used
])
def test_a_nodes_lateness_figures_count_only_when_their_span_lies_in_the_window(values, now, covered) -> None:
    from omni_vla.tools.bench_graph import _covers

    assert _covers(values, [10.0, 90.0], now) is covered
