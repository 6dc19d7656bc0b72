"""`omni-vla bench loop`: the real-time loop benchmark runs end to end and reports what it claims."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rosutil import REPO
from tiny_bundles import tiny_bundle


@pytest.mark.slow
def test_cloud_runs_are_interleaved_with_local_ones_and_really_splice_plans(tmp_path_factory) -> None:
    bundle = tiny_bundle(tmp_path_factory)
    cmd = [sys.executable, "-m", "omni_vla.tools.bench_loop", "--bundle", str(bundle), "--backends", "mnn",
           "--rates", "50", "--ticks", "150", "--rounds", "2", "--heap-ticks", "50", "--no-cold-start", "--rt-priority", "0",
           "--cloud", "--cloud-latency-ms", "100", "--replan-cadence", "0.5",
           "--cloud-network", "process,thread", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    local = out["mnn@50"]
    assert "cloud" not in local
    for name, network in (("mnn@50+cloud", "process"), ("mnn@50+cloud-thread", "thread")):
        cloud = out[name]
        assert local["ticks"] == cloud["ticks"] == 300 and cloud["cloud"]["network"] == network
        assert cloud["rounds"] == 2 and len(cloud["p99_lateness_ms_per_round"]) == 2
        lo, hi = min(cloud["p99_lateness_ms_per_round"]), max(cloud["p99_lateness_ms_per_round"])
        assert 0.9 * lo - 1e-3 <= cloud["p99_lateness_ms"] <= 1.1 * hi + 1e-3  # pooled over both rounds
        assert cloud["cloud"]["connected"] and cloud["cloud"]["plans_spliced"] >= 2, cloud["cloud"]
        assert cloud["cloud"]["rejected"] == 0
        assert cloud["p99_lateness_ratio_vs_no_cloud"] == pytest.approx(
            cloud["p99_lateness_ms"] / max(local["p99_lateness_ms"], 1e-6), rel=1e-2)
    assert out["settings"]["cloud_latency_ms"] == 100.0
