"""The safety benchmark runs and prints the contract's JSON (speed is judged from its numbers, not here)."""
from __future__ import annotations

import json

import pytest

from omni_vla_safety import bench


def test_bench_prints_median_and_p99_for_7_and_14_joints(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--json", "--repetitions", "300"]) == 0
    report = json.loads(capsys.readouterr().out)
    for n in ("7", "14"):
        assert 0 < report[n]["median_us"] <= report[n]["p99_us"]
        assert report[n]["with_bookkeeping"]["median_us"] > 0
    assert report["repetitions"] == 300 and report["python"] and report["threads"] == 1


def test_bench_refuses_too_few_repetitions_for_a_p99() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--repetitions", "5"])


def test_bench_fuzz_reports_steps_and_violations_per_robot_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--json", "--fuzz", "400", "--fuzz-episode", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    runs = {(r["robot"], r["rate_hz"]) for r in report["fuzz"]}
    assert {("panda", 100.0), ("panda", 1000.0), ("iiwa", 1000.0), ("aloha_vx300s", 100.0)} <= runs
    assert all(r["steps"] == 400 and r["episodes"] == 2 and r["steps_per_s"] > 0 for r in report["fuzz"])
    assert report["total_violations"] == 0 and report["total_steps"] == 400 * len(runs)


def test_bench_fuzz_in_parallel_processes_runs_the_same_cases(capsys: pytest.CaptureFixture[str]) -> None:
    """--jobs only spreads the robot-and-rate runs over processes: same runs, steps, episodes and verdicts."""
    reports = []
    for jobs in ("1", "3"):
        assert bench.main(["--json", "--fuzz", "150", "--fuzz-episode", "100", "--jobs", jobs]) == 0
        report = json.loads(capsys.readouterr().out)
        reports.append([{k: r[k] for k in ("robot", "rate_hz", "steps", "episodes", "violations_by_kind")}
                        for r in report["fuzz"]])
    assert reports[0] == reports[1] and len(reports[0]) == 8


def test_bench_refuses_zero_jobs() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--fuzz", "10", "--jobs", "0"])
