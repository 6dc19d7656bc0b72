"""The numbers an evaluation reports, pinned on hand-built episodes with failures, timeouts and empty groups.

Every expected figure is computed here independently of sim/report.py (closed forms, hand arithmetic), so a
counting bug (a timeout counted as a success, a fake interval for no episodes, a mean over the wrong group)
fails a test instead of surviving the suite.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from omni_vla_sim.report import EpisodeResult, comparable, smoothness, summarise, wilson, write_atomic, write_report

Z = 1.959964


def wilson_closed_form(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """(k + z^2/2) / (n + z^2) -/+ z / (n + z^2) * sqrt(k (n - k) / n + z^2 / 4), clipped to [0, 1]."""
    centre = (k + z * z / 2) / (n + z * z)
    half = z / (n + z * z) * math.sqrt(k * (n - k) / n + z * z / 4)
    return max(0.0, centre - half), min(1.0, centre + half)


def ep(task: str = "pick_red", seed: int = 1_000_000, success: bool = True, steps: int = 50, *,
       held_out: bool = False, **kw) -> EpisodeResult:
    return EpisodeResult(task=task, seed=seed, instruction=f"{task} {'held' if held_out else 'train'}",
                         held_out=held_out, success=success, steps=steps, **kw)


def timeout(task: str = "pick_red", seed: int = 1_000_000, steps: int = 120, **kw) -> EpisodeResult:
    """A truncated episode: it ran to the task's step budget without success, so it is a failure."""
    return ep(task, seed, success=False, steps=steps, **kw)


# ------------------------------------------------------------------------------------------- Wilson
@pytest.mark.parametrize(("k", "n", "expected"), [
    (5, 10, (0.2366, 0.7634)),
    (8, 10, (0.4902, 0.9433)),
    (0, 10, (0.0, 0.2775)),
    (10, 10, (0.7225, 1.0)),
    (1, 1, (0.2065, 1.0)),
    (0, 1, (0.0, 0.7935)),
    (1, 3, (0.0615, 0.7923)),
    (45, 50, (0.7864, 0.9565)),
])
def test_wilson_matches_reference_values_and_the_closed_form(k: int, n: int, expected: tuple) -> None:
    lo, hi = wilson(k, n)
    assert (round(lo, 4), round(hi, 4)) == expected
    assert (lo, hi) == pytest.approx(wilson_closed_form(k, n), abs=1e-12)


def test_wilson_is_exactly_clipped_at_zero_and_one() -> None:
    for n in (1, 2, 7, 50):
        assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0
        assert 0.0 < wilson(0, n)[1] < 1.0 and 0.0 < wilson(n, n)[0] < 1.0


def test_wilson_bounds_are_exact_for_numpy_counts_too() -> None:
    """Counts summed by numpy are np.int64: the 0% and 100% bounds must still be exactly 0 and 1."""
    for n in (4, 7, 50):
        assert wilson(np.int64(0), n)[0] == 0.0 and wilson(np.int64(n), np.int64(n))[1] == 1.0


def test_wilson_uses_the_95_percent_quantile_by_default() -> None:
    assert wilson(5, 10) == wilson(5, 10, z=Z)
    lo99, hi99 = wilson(5, 10, z=2.575829)
    assert (round(lo99, 4), round(hi99, 4)) == (0.1842, 0.8158), "a wider z widens the interval"
    assert (lo99, hi99) == pytest.approx(wilson_closed_form(5, 10, 2.575829), abs=1e-12)


def test_wilson_for_no_episodes_is_no_interval_not_zero_to_one() -> None:
    lo, hi = wilson(0, 0)
    assert math.isnan(lo) and math.isnan(hi)


@pytest.mark.parametrize(("k", "n"), [(11, 10), (-1, 10), (1, 0)])
def test_wilson_refuses_impossible_counts(k: int, n: int) -> None:
    with pytest.raises(ValueError, match=f"{k} successes out of {n} episodes"):
        wilson(k, n)


# -------------------------------------------------------------------------------- per-task / overall
def test_timeouts_and_failures_are_not_successes_per_task_and_overall() -> None:
    results = [
        ep("pick_red", 1_000_000, True, 40),
        timeout("pick_red", 1_000_001, 120),
        ep("pick_red", 1_000_002, False, 77),  # failed early (e.g. dropped)
        ep("touch_yellow", 1_000_000, True, 20),
        ep("touch_yellow", 1_000_001, True, 30),
        timeout("touch_yellow", 1_000_002, 100),
        timeout("touch_yellow", 1_000_003, 100),
    ]
    r = summarise(results, {}, {}, 0.0)
    pick, touch, overall = r["tasks"]["pick_red"], r["tasks"]["touch_yellow"], r["overall"]
    assert (pick["successes"], pick["episodes"], pick["rate"]) == (1, 3, 1 / 3)
    assert (touch["successes"], touch["episodes"], touch["rate"]) == (2, 4, 0.5)
    assert (overall["successes"], overall["episodes"], overall["rate"]) == (3, 7, 3 / 7)
    for g, (k, n) in ((pick, (1, 3)), (touch, (2, 4)), (overall, (3, 7))):
        assert g["ci95"] == [round(v, 4) for v in wilson_closed_form(k, n)]
    assert pick["ci95"] == [0.0615, 0.7923]
    assert pick["mean_episode_length"] == (40 + 120 + 77) / 3
    assert touch["mean_episode_length"] == (20 + 30 + 100 + 100) / 4
    assert overall["mean_episode_length"] == (40 + 120 + 77 + 20 + 30 + 100 + 100) / 7
    assert pick["seeds"] == [1_000_000, 1_000_001, 1_000_002]
    assert touch["seeds"] == overall["seeds"] == [1_000_000, 1_000_001, 1_000_002, 1_000_003]
    assert list(r["tasks"]) == ["pick_red", "touch_yellow"], "tasks in sorted order"
    assert "held_out_instructions" not in r and "trained_instructions" not in r


def test_tasks_are_grouped_by_name_not_by_string_identity() -> None:
    """Results unpickled from workers or read from episodes.json carry equal but distinct task strings."""
    results = [ep("".join(["pick", "_red"]), 1_000_000 + i, success=i < 2) for i in range(3)]
    assert results[0].task is not results[1].task
    g = summarise(results, {}, {}, 0.0)["tasks"]["pick_red"]
    assert (g["successes"], g["episodes"]) == (2, 3)


def test_all_failures_give_zero_rate_and_a_real_upper_bound() -> None:
    r = summarise([timeout(seed=1_000_000 + i) for i in range(10)], {}, {}, 0.0)
    g = r["overall"]
    assert (g["successes"], g["episodes"], g["rate"]) == (0, 10, 0.0)
    assert g["ci95"] == [0.0, 0.2775]
    assert r["tasks"]["pick_red"] == g


def test_single_episode_is_counted_with_its_wide_interval() -> None:
    win = summarise([ep(steps=33, interventions=2, latency_ms=[7.0])], {}, {}, 0.0)["overall"]
    assert (win["successes"], win["episodes"], win["rate"], win["ci95"]) == (1, 1, 1.0, [0.2065, 1.0])
    assert win["mean_episode_length"] == 33.0 and win["interventions_per_episode"] == 2.0
    assert win["latency_ms"] == {"p50": 7.0, "p99": 7.0}
    loss = summarise([timeout()], {}, {}, 0.0)["overall"]
    assert (loss["successes"], loss["episodes"], loss["rate"], loss["ci95"]) == (0, 1, 0.0, [0.0, 0.7935])


def test_no_episodes_report_nan_never_a_fake_rate() -> None:
    r = summarise([], {"v": 1}, {"s": 2}, 1.0)
    g = r["overall"]
    assert r["tasks"] == {} and (g["successes"], g["episodes"]) == (0, 0)
    for key in ("rate", "cloud_plans_per_episode", "mean_episode_length", "interventions_per_episode",
                "jerk_mean", "jerk_p99", "boundary_jump_mean"):
        assert math.isnan(g[key]), key
    assert all(math.isnan(v) for v in g["ci95"]) and len(g["ci95"]) == 2
    assert g["seeds"] == [] and g["interventions_by_kind_per_episode"] == {} and g["latency_ms"] is None


def test_held_out_and_trained_instructions_are_split_and_counted_separately() -> None:
    results = [
        ep("pick_red", 1, True, 10, held_out=True),
        timeout("pick_red", 2, held_out=True),
        ep("touch_yellow", 3, True, 20, held_out=True),
        ep("pick_red", 4, True, 30),
        timeout("touch_yellow", 5),
    ]
    r = summarise(results, {}, {}, 0.0)
    held, trained = r["held_out_instructions"], r["trained_instructions"]
    assert (held["successes"], held["episodes"], held["rate"], held["seeds"]) == (2, 3, 2 / 3, [1, 2, 3])
    assert (trained["successes"], trained["episodes"], trained["rate"], trained["seeds"]) == (1, 2, 0.5, [4, 5])
    assert held["ci95"] == [round(v, 4) for v in wilson_closed_form(2, 3)]
    assert r["overall"]["successes"] == 3 and r["overall"]["episodes"] == 5


def test_an_all_held_out_run_has_an_empty_trained_group_marked_nan() -> None:
    r = summarise([ep(held_out=True, seed=1), timeout(held_out=True, seed=2)], {}, {}, 0.0)
    assert (r["held_out_instructions"]["successes"], r["held_out_instructions"]["episodes"]) == (1, 2)
    trained = r["trained_instructions"]
    assert trained["episodes"] == 0 and math.isnan(trained["rate"]) and all(map(math.isnan, trained["ci95"]))


def test_per_episode_means_interventions_by_kind_and_latency_percentiles() -> None:
    results = [
        ep(seed=1, interventions=3, interventions_by_kind={"clamp": 2, "estop": 1}, cloud_plans=1,
           jerk_mean=10.0, jerk_p99=40.0, boundary_jump_mean=0.5, latency_ms=[1.0, 2.0]),
        timeout(seed=2, interventions=0, interventions_by_kind={}, cloud_plans=0,
                jerk_mean=20.0, jerk_p99=60.0, boundary_jump_mean=0.0, latency_ms=[3.0, 4.0]),
        ep(seed=3, success=False, interventions=5, interventions_by_kind={"clamp": 4, "velocity": 1},
           cloud_plans=2, jerk_mean=0.0, jerk_p99=5.0, boundary_jump_mean=0.25, latency_ms=[10.0]),
        ep(seed=4, interventions=0, latency_ms=[], jerk_mean=0.0, jerk_p99=0.0, boundary_jump_mean=0.0),
    ]
    g = summarise(results, {}, {}, 0.0)["overall"]
    assert (g["successes"], g["episodes"]) == (2, 4)
    assert g["interventions_per_episode"] == (3 + 0 + 5 + 0) / 4
    assert g["interventions_by_kind_per_episode"] == {"clamp": 6 / 4, "estop": 1 / 4, "velocity": 1 / 4}
    assert list(g["interventions_by_kind_per_episode"]) == ["clamp", "estop", "velocity"]
    assert g["cloud_plans_per_episode"] == 3 / 4
    assert g["jerk_mean"] == 30.0 / 4 and g["jerk_p99"] == 105.0 / 4 and g["boundary_jump_mean"] == 0.75 / 4
    # Pooled latencies 1, 2, 3, 4, 10: the median is 3; p99 interpolates at rank 0.99 * 4 = 3.96.
    assert g["latency_ms"]["p50"] == 3.0
    assert g["latency_ms"]["p99"] == pytest.approx(4.0 + 0.96 * 6.0, abs=1e-12)


def test_a_figure_an_episode_did_not_measure_is_left_out_of_the_mean_not_counted_as_zero() -> None:
    results = [ep(seed=1, jerk_mean=10.0, jerk_p99=30.0), ep(seed=2, jerk_mean=20.0, jerk_p99=50.0), ep(seed=3)]
    g = summarise(results, {}, {}, 0.0)["overall"]
    assert (g["jerk_mean"], g["jerk_p99"]) == (15.0, 40.0)
    assert g["boundary_jump_mean"] is None, "no episode measured it"
    assert summarise([], {}, {}, 0.0)["overall"]["jerk_mean"] != summarise([], {}, {}, 0.0)["overall"]["jerk_mean"]


def test_loop_figures_take_the_median_p50_and_the_worst_tail_over_episodes() -> None:
    results = [ep(seed=1, loop={"inference_latency_p50_ms": 4.0, "inference_latency_p95_ms": 9.0,
                                "tick_lateness_p99_ms": 0.2, "missed_ticks": 0.0}),
               ep(seed=2, loop={"inference_latency_p50_ms": 6.0, "inference_latency_p95_ms": 7.0,
                                "tick_lateness_p99_ms": 1.5, "missed_ticks": 3.0}),
               ep(seed=3, loop={"inference_latency_p50_ms": 50.0, "inference_latency_p95_ms": 8.0}),
               ep(seed=4)]
    loop = summarise(results, {}, {}, 0.0)["overall"]["loop"]
    assert loop == {"inference_latency_p50_ms": 6.0, "inference_latency_p95_ms": 9.0, "tick_lateness_p99_ms": 1.5,
                    "missed_ticks": 3.0}
    assert summarise([ep()], {}, {}, 0.0)["overall"]["loop"] == {}
    assert "loop" not in comparable(summarise(results, {}, {}, 0.0))["overall"], "timing is not comparable"


def test_no_latency_samples_means_no_latency_figures() -> None:
    assert summarise([ep(), timeout(seed=2)], {}, {}, 0.0)["overall"]["latency_ms"] is None


def test_the_report_does_not_depend_on_episode_order_and_keeps_run_metadata() -> None:
    results = [ep("touch_yellow", 3, True), timeout("pick_red", 2), ep("pick_red", 1, True)]
    a = summarise(results, {"mujoco": "3"}, {"workers": 2}, 12.3456)
    b = summarise(results[::-1], {"mujoco": "3"}, {"workers": 2}, 12.3456)
    assert a == b
    assert a["versions"] == {"mujoco": "3"} and a["settings"] == {"workers": 2} and a["wall_time_s"] == 12.35


def test_comparable_drops_wall_time_versions_settings_and_latency_at_every_level() -> None:
    r = summarise([ep(latency_ms=[1.0]), timeout(seed=2)], {"v": 1}, {"s": 1}, 3.0)
    c = comparable(r)
    assert set(c) == {"tasks", "overall"}
    assert "latency_ms" not in c["overall"] and "latency_ms" not in c["tasks"]["pick_red"]
    kept = {k: v for k, v in r["overall"].items() if k not in ("latency_ms", "loop")}
    assert c["overall"] == kept and c["overall"]["successes"] == 1
    slower = summarise([ep(latency_ms=[9.0]), timeout(seed=2)], {"v": 2}, {"s": 2}, 99.0)
    assert comparable(slower) == c
    stored = json.loads(json.dumps(r))  # a report.json read back: its keys are fresh strings, not literals
    assert comparable(stored) == c and "latency_ms" not in comparable(stored)["overall"]


def test_an_episode_reports_zero_counts_and_no_traces_unless_given() -> None:
    e = EpisodeResult(task="t", seed=1, instruction="i", held_out=False, success=False, steps=3)
    assert dataclasses.asdict(e) == {
        "task": "t", "seed": 1, "instruction": "i", "held_out": False, "success": False, "steps": 3,
        "interventions": 0, "interventions_by_kind": {}, "shaping": 0, "clamps": 0, "clamps_by_kind": {}, "holds": 0, "cloud_plans": 0, "jerk_mean": None,
        "jerk_p99": None, "boundary_jump_mean": None, "latency_ms": [], "loop": {}, "actions": None, "video": None,
        "frames": None}
    assert e.key() == ("t", 1, "i")


# ------------------------------------------------------------------------------------------ smoothness
DT = 0.05


def test_jerk_is_the_third_difference_of_the_seven_joints_over_dt_cubed() -> None:
    a = np.zeros((6, 8))
    a[:, 0] = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]  # one step: third differences 1, -2, 1 on joint 1
    a[:, 7] = [0.0, 0.04, 0.0, 0.04, 0.0, 0.04]  # the gripper is not a joint: it must not count
    s = smoothness(a, DT, [])
    jerks = np.array([1.0, 2.0, 1.0]) / DT**3
    assert s["jerk_mean"] == pytest.approx(jerks.mean(), rel=1e-12)
    # p99 of (8000, 8000, 16000) by linear interpolation: rank 0.99 * 2 = 1.98 -> 8000 + 0.98 * 8000.
    assert s["jerk_p99"] == pytest.approx(8000 + 0.98 * 8000, rel=1e-12)
    assert s["boundary_jump_mean"] == 0.0


def test_jerk_is_a_norm_over_joints() -> None:
    a = np.zeros((4, 8))
    a[3, 0], a[3, 1] = 3.0, 4.0
    assert smoothness(a, 1.0, [])["jerk_mean"] == pytest.approx(5.0)
    assert smoothness(a, 0.5, [])["jerk_mean"] == pytest.approx(40.0), "divided by dt^3"
    a[3, 6] = 12.0
    assert smoothness(a, 1.0, [])["jerk_mean"] == pytest.approx(13.0), "joint 7 counts"


def test_fewer_than_four_actions_have_no_jerk() -> None:
    a = np.arange(24, dtype=float).reshape(3, 8) ** 2
    assert smoothness(a, DT, []) == {"jerk_mean": 0.0, "jerk_p99": 0.0, "boundary_jump_mean": 0.0}
    assert smoothness(np.zeros((0, 8)), DT, [0, 1, 2]) == {"jerk_mean": 0.0, "jerk_p99": 0.0,
                                                          "boundary_jump_mean": 0.0}
    four = np.zeros((4, 8))
    four[3, 2] = 1.0
    assert smoothness(four, 1.0, [])["jerk_mean"] == 1.0


def test_boundary_jump_is_the_deviation_from_constant_velocity_at_valid_boundaries() -> None:
    a = np.zeros((6, 8))
    a[:, 0] = np.arange(6) * 0.1  # constant velocity: a seamless splice has no jump
    a[:, 7] = [0, 1, 0, 1, 0, 1]  # gripper ignored
    assert smoothness(a, DT, [2, 3, 4, 5])["boundary_jump_mean"] == pytest.approx(0.0, abs=1e-15)
    a[4:, 1] = 0.3  # joint 2 steps by 0.3 at tick 4 and holds: jumps 0.3 at b=4, -0.3 at b=5
    a[2:, 6] = 0.4  # joint 7 steps at tick 2: 0.4 at b=2, -0.4 at b=3
    assert smoothness(a, DT, [4])["boundary_jump_mean"] == pytest.approx(0.3)
    assert smoothness(a, DT, [5])["boundary_jump_mean"] == pytest.approx(0.3)
    assert smoothness(a, DT, [2])["boundary_jump_mean"] == pytest.approx(0.4)
    assert smoothness(a, DT, [2, 4])["boundary_jump_mean"] == pytest.approx(0.35)
    # Boundaries 0 and 1 have no two previous actions, 6 and beyond no action: ignored, not counted as 0.
    assert smoothness(a, DT, [0, 1, 4, 6, 7])["boundary_jump_mean"] == pytest.approx(0.3)
    assert smoothness(a, DT, [0, 1, 6])["boundary_jump_mean"] == 0.0


def test_boundary_jump_is_a_norm_over_the_seven_joints() -> None:
    a = np.zeros((3, 8))
    a[2, :2] = (3.0, 4.0)
    assert smoothness(a, DT, [2])["boundary_jump_mean"] == pytest.approx(5.0)
    a[1, :2] = (1.0, 1.0)  # -2 * previous: (3 - 2, 4 - 2)
    assert smoothness(a, DT, [2])["boundary_jump_mean"] == pytest.approx(math.hypot(1.0, 2.0))


# ------------------------------------------------------------------------------------------- report.md
def test_markdown_table_shows_the_counts_rates_and_intervals(tmp_path: Path) -> None:
    results = [ep("pick_red", 1, True, 40, interventions=1, shaping=3, clamps=1, clamps_by_kind={"max_step": 1},
                  jerk_mean=12.34, jerk_p99=56.78, boundary_jump_mean=0.01234, latency_ms=[2.0, 4.0]),
               timeout("pick_red", 2, 120, interventions=2, shaping=4, jerk_mean=0.0, jerk_p99=0.0,
                       boundary_jump_mean=0.0)]
    report = summarise(results, {"v": 1}, {"s": 1}, 1.5)
    paths = write_report(tmp_path, report, results)
    md = paths["markdown"].read_text()
    assert "| task | k/n | success | 95% CI | mean length | interventions/ep | shaping/ep | clamps/ep | jerk mean | " \
           "jerk p99 | boundary jump | latency p50/p99 ms |\n" in md, "no vla_node figures, no vla_node columns"
    assert "| pick_red | 1/2 | 50.0% | [9.4, 90.5] | 80.0 | 1.50 | 3.50 | 0.50 | 6.2 | 28.4 | 0.0062 | 3.00 / 3.98 |" in md
    assert report["tasks"]["pick_red"]["clamps_by_kind_per_episode"] == {"max_step": 0.5}
    assert "| **overall** | 1/2 | 50.0% | [9.4, 90.5] |" in md
    assert paths["json"].read_text() == json.dumps(report, indent=2, default=str)
    eps = json.loads(paths["episodes"].read_text())
    assert [(e["seed"], e["success"]) for e in eps] == [(1, True), (2, False)]
    assert (tmp_path / "success.png").stat().st_size > 0 and (tmp_path / "latency.png").exists()
    assert not (tmp_path / "actions.png").exists(), "no traced actions, no action plot"
    assert "## Videos" not in md


def test_markdown_leaves_out_what_was_not_measured_and_lists_videos(tmp_path: Path) -> None:
    results = [dataclasses.replace(ep(actions=[[0.0] * 8] * 3, jerk_mean=0.0, jerk_p99=0.0),
                                   video=str(tmp_path / "pick_red_1.mp4"))]
    paths = write_report(tmp_path, summarise(results, {}, {}, 0.0), results, title="T")
    md = paths["markdown"].read_text()
    assert md.startswith("# T\n")
    assert "| pick_red | 1/1 | 100.0% | [20.6, 100.0] | 50.0 | 0.00 | 0.00 | 0.00 | 0.0 | 0.0 |\n" in md
    assert "boundary jump" not in md and "latency" not in md
    assert "## Videos\n- [pick_red_1.mp4](pick_red_1.mp4)" in md
    assert (tmp_path / "actions.png").exists() and not (tmp_path / "latency.png").exists()


def test_reports_go_into_new_nested_directories_atomically(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "a" / "b"
    assert write_atomic(out / "x" / "note.txt", "hi").read_text() == "hi"
    results = [timeout()]
    paths = write_report(tmp_path / "new" / "nested", summarise(results, {}, {}, 0.0), results)
    assert paths["markdown"].parent == tmp_path / "new" / "nested"
    assert sorted(p.name for p in paths["markdown"].parent.iterdir()) == [
        "episodes.json", "interventions.png", "report.json", "report.md", "success.png"], \
        "no temporary file left behind"


# -------------------------------------------------------------------------- eval: success is the env's
def test_a_timed_out_episode_is_a_failure_not_a_success(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_episode counts success only from the env's success flag: the expert cut off after 5 ticks fails."""
    from omni_vla_sim import tasks
    from omni_vla_sim.eval import EpisodeSpec, EvalSettings, release_cache, run_episode

    s = EvalSettings(backend="expert", tasks=("touch_yellow",), episodes=1, image_size=16, record_actions=False)
    spec = EpisodeSpec(s, "touch_yellow", 1_000_000)
    monkeypatch.setattr(tasks.get_task("touch_yellow"), "max_steps", 5)  # the env's step budget
    try:
        r = run_episode(spec)
    finally:
        release_cache()
    assert r.steps == 5, "the episode ends at the step budget"
    assert r.success is False
    assert summarise([r], {}, {}, 0.0)["overall"]["successes"] == 0
