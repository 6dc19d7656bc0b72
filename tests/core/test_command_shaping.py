"""Command shaping (omni_vla/core/shaping.py): the rows the loop sends keep to a fraction of the robot's velocity
and acceleration limits and, where set, stay within a lead bound of the measured position. Checked against an
oracle that simulates nothing: it only replays the sent rows and tests the bounds they must satisfy, over random
wanted/measured sequences with jumps, holds and resets."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_vla.core.assembly import build_loop
from omni_vla.core.settings import LoopSettings
from omni_vla.core.shaping import CommandShaper, JointRates, parse_max_lead
from omni_vla.inference.client import SyncInference

DT = 0.05
VMAX = np.array([2.0, 1.0, 0.2])
AMAX = np.array([10.0, 5.0, 4.0])
EPS = 1e-9


def limits_entry(v: float | None, a: float | None, d: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(has_velocity_limits=v is not None, max_velocity=v if v is not None else float("inf"),
                           has_acceleration_limits=a is not None, max_acceleration=a if a is not None else float("inf"),
                           has_deceleration_limits=d is not None, max_deceleration=d if d is not None else float("inf"))


def check_rows(rows: np.ndarray, measured: np.ndarray, starts: list[int], fraction: float, lead: np.ndarray) -> None:
    """The oracle: velocities and their changes from consecutive rows (a start is from the measured position at
    rest), bounded where no lead bound acted; lead joints within their bound of the measurement."""
    vmax, adt = fraction * VMAX, fraction * AMAX * DT
    free = ~np.isfinite(lead)
    prev_q, prev_v = measured[0], np.zeros(3)
    for k in range(len(rows)):
        if k in starts:
            prev_q, prev_v = measured[k], np.zeros(3)
        v = (rows[k] - prev_q) / DT
        assert np.all(np.abs(v[free]) <= vmax[free] * (1 + 1e-9) + EPS), (k, v, vmax)
        assert np.all(np.abs(v - prev_v)[free] <= adt[free] * (1 + 1e-9) + 1e-7), (k, v, prev_v, adt)
        assert np.all(np.abs(rows[k] - measured[k])[~free] <= lead[~free] + EPS), (k, rows[k], measured[k])
        prev_q, prev_v = rows[k], v


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sent_rows_keep_to_the_fraction_of_the_limits_and_within_the_lead_of_the_measurement(data) -> None:
    fraction = data.draw(st.sampled_from([0.5, 0.9, 1.0]))
    lead = np.array([np.inf, np.inf, data.draw(st.sampled_from([np.inf, 0.018, 0.05]))])
    shaper = CommandShaper(JointRates(VMAX, AMAX), fraction, DT, lead)
    n = data.draw(st.integers(2, 60))
    wants = data.draw(st.lists(st.lists(st.floats(-2, 2), min_size=3, max_size=3), min_size=n, max_size=n))
    meas = data.draw(st.lists(st.lists(st.floats(-2, 2), min_size=3, max_size=3), min_size=n, max_size=n))
    resets = data.draw(st.sets(st.integers(1, n - 1), max_size=3))
    rows, starts = [], [0]
    for k in range(n):
        if k in resets:
            shaper.reset()
            starts.append(k)
        rows.append(shaper(np.array(wants[k]), np.array(meas[k])).copy())
    check_rows(np.array(rows), np.array(meas, np.float64), starts, fraction, lead)


@pytest.mark.parametrize("target", [0.003, -0.4, 1.7, -2.0])
def test_a_constant_row_is_reached_exactly_passing_it_by_at_most_half_a_dt_squared(target: float) -> None:
    shaper = CommandShaper(JointRates(VMAX, AMAX), 0.9, DT)
    want = np.full(3, target)
    q = np.array([shaper(want, np.zeros(3)).copy() for _ in range(400)])
    passed = (q - target) * np.sign(target)
    assert np.all(passed <= 0.5 * 0.9 * AMAX * DT * DT + 1e-12), passed.max(axis=0)
    np.testing.assert_array_equal(q[-1], want)
    assert np.all(np.diff(q[-20:], axis=0) == 0), "not at rest on the row"


def test_the_first_row_starts_from_the_measured_position_at_rest() -> None:
    shaper = CommandShaper(JointRates(VMAX, AMAX), 1.0, DT)
    meas = np.array([0.3, -0.2, 0.01])
    row = shaper(meas + 5.0, meas)
    np.testing.assert_allclose(row - meas, AMAX * DT * DT)


def test_a_gripper_asked_to_close_on_an_object_stays_within_its_lead_of_the_fingers() -> None:
    shaper = CommandShaper(JointRates(VMAX, AMAX), 0.9, DT, np.array([np.inf, np.inf, 0.018]))
    fingers = np.array([0.0, 0.0, 0.0205])  # held open by a 4 cm cube
    for _ in range(100):
        row = shaper(np.zeros(3), fingers)
    assert row[2] == pytest.approx(0.0205 - 0.018)


def test_missing_limits_are_refused_naming_the_joint_and_deceleration_tightens_acceleration() -> None:
    names = ["a", "b"]
    with pytest.raises(ValueError, match="'b' has no entry"):
        JointRates.from_limits({"a": limits_entry(1.0, 2.0)}, names)
    with pytest.raises(ValueError, match="'b' needs has_velocity_limits and has_acceleration_limits"):
        JointRates.from_limits({"a": limits_entry(1.0, 2.0), "b": limits_entry(1.0, None)}, names)
    with pytest.raises(ValueError, match="finite positive"):
        JointRates.from_limits({"a": limits_entry(1.0, 2.0), "b": limits_entry(0.0, 2.0)}, names)
    rates = JointRates.from_limits({"a": limits_entry(1.0, 2.0, 1.5), "b": limits_entry(3.0, 4.0)}, names)
    np.testing.assert_array_equal(rates.max_acceleration, [1.5, 4.0])
    np.testing.assert_array_equal(rates.max_velocity, [1.0, 3.0])


@pytest.mark.parametrize("entries, message", [
    (["c=0.1"], "expected 'joint=bound' with a joint of"),
    (["a0.1"], "expected 'joint=bound'"),
    (["a=x"], "'x' is not a number"),
    (["a=0"], "positive finite"),
    (["a=inf"], "positive finite"),
    (["a=0.1", "a=0.2"], "names 'a' twice"),
])
def test_bad_lead_entries_are_refused_in_one_line(entries: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as exc:
        parse_max_lead(entries, ["a", "b"])
    assert "\n" not in str(exc.value)


def test_lead_entries_land_on_their_joints() -> None:
    np.testing.assert_array_equal(parse_max_lead([" b = 0.02"], ["a", "b"]), [np.inf, 0.02])


class _Constant:
    """A zero-delay runtime whose chunks are one constant row, far from the start: the plan jumps."""
    backend, cameras = "toy", ()
    joint_names = ["a", "b", "c"]
    action_dim, horizon, max_prefix, embedding_dim = 3, 8, 0, 1
    control_rate_hz, execute_steps = None, None

    def encode_instruction(self, text: str) -> np.ndarray:
        return np.zeros(1, np.float32)

    def infer(self, images, state, instruction, prefix, prefix_len, noise, out) -> None:
        out[:] = 1.5

    def close(self) -> None:
        pass


def _loop(fraction: float, limits: dict | None):
    settings = LoopSettings(rate_hz=1 / DT, execution_horizon=4, joint_names=["a", "b", "c"],
                            command_accel_fraction=fraction, command_max_lead=["c=0.05"])
    return build_loop(settings, SyncInference(_Constant()), limits=limits)


def test_the_loop_sends_shaped_rows_restarts_after_a_hold_and_sends_the_plan_without_limits() -> None:
    limits = {n: limits_entry(v, a) for n, v, a in zip("abc", VMAX, AMAX)}
    loop = _loop(0.9, limits)
    meas = np.zeros(3)
    obs = {"qpos": meas, "instruction": "go"}
    rows, starts = [], [0]
    for k in range(30):
        if k == 15:
            assert loop.step({"qpos": None, "instruction": "go"}, k) is None  # a hold: no joint state
            starts.append(len(rows))
            continue
        row = loop.step(obs, k)
        assert row is not None
        rows.append(row.copy())
    check_rows(np.array(rows), np.zeros((len(rows), 3)), starts, 0.9, np.array([np.inf, np.inf, 0.05]))
    assert rows[14][0] > rows[15][0] == pytest.approx(0.9 * AMAX[0] * DT * DT), "after the hold: from rest again"
    unshaped = _loop(0.9, None)
    assert unshaped.shaper is None
    np.testing.assert_array_equal(unshaped.step(obs, 0), [1.5, 1.5, 1.5])
    with pytest.raises(ValueError, match="'c' needs has_velocity_limits"):
        _loop(0.9, {**limits, "c": limits_entry(None, 1.0)})


@pytest.mark.parametrize("velocity, acceleration", [
    ([1.0, 0.0], [1.0, 1.0]), ([1.0, -1.0], [1.0, 1.0]), ([1.0, np.inf], [1.0, 1.0]), ([1.0, np.nan], [1.0, 1.0]),
    ([1.0, 1.0], [1.0, 0.0]), ([1.0, 1.0], [-1.0, 1.0]), ([1.0, 1.0], [1.0, np.inf]), ([1.0, 1.0], [np.nan, 1.0]),
    ([1.0, 1.0], [1.0]), ([1.0], [1.0, 1.0]), (1.0, 1.0), ([[1.0, 1.0]], [[1.0, 1.0]]),
])
def test_rates_must_be_finite_positive_and_one_per_joint(velocity: list[float], acceleration: list[float]) -> None:
    with pytest.raises(ValueError, match="finite positive velocity and acceleration"):
        JointRates(velocity, acceleration)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.01, np.nan])
def test_a_fraction_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="must be in"):
        CommandShaper(JointRates(VMAX, AMAX), fraction, DT)


@pytest.mark.parametrize("lead", [np.full(2, 0.1), np.full(4, 0.1), np.full((3, 1), 0.1)])
def test_a_lead_per_joint_is_required(lead: np.ndarray) -> None:
    with pytest.raises(ValueError, match="entries for 3 joints"):
        CommandShaper(JointRates(VMAX, AMAX), 0.9, DT, lead)


def test_a_negative_lead_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="positive finite"):
        parse_max_lead(["a=-0.1"], ["a", "b"])


def test_deceleration_counts_only_where_the_file_says_it_is_limited() -> None:
    entry = limits_entry(1.0, 2.0, 0.5)
    unlimited = SimpleNamespace(**{**vars(entry), "has_deceleration_limits": False})
    np.testing.assert_array_equal(JointRates.from_limits({"a": unlimited}, ["a"]).max_acceleration, [2.0])


def test_limits_below_one_are_as_good_as_any() -> None:
    rates = JointRates([0.5, 0.2], [0.25, 4.0])
    np.testing.assert_array_equal(rates.max_velocity, [0.5, 0.2])
    assert parse_max_lead(["a=0.5"], ["a"])[0] == 0.5


@pytest.mark.parametrize("distance", [0.2, 0.4, 0.8, 1.7])
def test_a_far_row_is_reached_in_the_time_optimal_number_of_ticks(distance: float) -> None:
    """Accelerate at a, cruise at vmax, brake at a: the braking speed is what lets the shaper keep going until it
    must brake, so it arrives in the first tick at or after the continuous optimum (a slower curve arrives later)."""
    shaper = CommandShaper(JointRates(VMAX, AMAX), 0.9, DT)
    v, a = 0.9 * VMAX[0], 0.9 * AMAX[0]
    ramp = v / a
    optimum = 2 * np.sqrt(distance / a) if distance < v * ramp else distance / v + ramp
    want = np.array([distance, 0.0, 0.0])
    ticks = next(k for k in range(1, 1000) if shaper(want, np.zeros(3))[0] == distance)
    assert ticks <= np.ceil(optimum / DT - 1e-9), (ticks, optimum / DT)


def test_a_starved_tick_is_not_a_hold_the_shaped_motion_goes_on() -> None:
    """The queue running dry (inference slower than the horizon allows) sends nothing for a tick while the supervisor
    still follows the rows it has: the next row continues the motion instead of restarting from the measurement."""
    limits = {n: limits_entry(v, a) for n, v, a in zip("abc", VMAX, AMAX)}
    settings = LoopSettings(rate_hz=1 / DT, execution_horizon=4, joint_names=["a", "b", "c"],
                            command_accel_fraction=0.9)
    loop = build_loop(settings, SyncInference(_Constant(), delay_ticks=6, period_s=DT), limits=limits)
    obs = {"qpos": np.zeros(3), "instruction": "go"}
    last, starved = None, 0
    for k in range(60):
        row = loop.step(obs, k)
        if row is None:
            starved += last is not None
            continue
        if last is not None:
            assert row[0] >= last[0] - 1e-12, (k, row, last)  # no jump back to the measured 0.0
        last = row.copy()
    assert loop.controller.counts["starved_ticks"] > 0 and starved > 0


def test_a_shaped_tick_retains_nothing_and_reuses_its_output_buffer() -> None:
    """The shaper runs inside the control tick: its intermediates live in preallocated buffers, it returns the same
    buffer every tick, and 1000 ticks retain no memory (the loop's own allocation check, as for the controller)."""
    import tracemalloc

    shaper = CommandShaper(JointRates(VMAX, AMAX), 0.9, DT, np.array([np.inf, np.inf, 0.018]))
    wants = [np.array([1.5, -0.5, 0.0]), np.array([-1.0, 0.3, 0.04])]
    meas = np.array([0.1, 0.0, 0.02])
    out = shaper(wants[0], meas)
    for k in range(50):
        assert shaper(wants[k % 2], meas) is out
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(1000):
            shaper(wants[(k // 40) % 2], meas)
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert growth < 1024, f"{growth} bytes retained over 1000 shaped ticks"
