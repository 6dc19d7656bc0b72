"""The helpers safety/ shares with the ROS side of omni_vla (errors, ros_params, rt, interrupt): exact outputs,
so a mutation of any of them fails here."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from array import array
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from rcl_interfaces.msg import ParameterType as PT

from omni_vla_safety import rt
from omni_vla_safety.errors import explain, one_line
from omni_vla_safety.interrupt import SigintFlag
from omni_vla_safety.ros_params import (FLOAT_BOUND, INT_BOUND, READ_ONLY_TEXT, coerce, descriptor, model_fields,
                                        parameter_type, plain, unknown_overrides)


# ----- errors -------------------------------------------------------------------------------------------
class Inner(BaseModel):
    depth: int = Field(1, lt=10)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate_hz: float = Field(10.0, gt=0)
    count: int = Field(1, ge=1)
    share: float = Field(0.5, le=1.0)
    inner: Inner = Inner()

    @model_validator(mode="after")
    def _whole(self) -> "Model":
        if self.count == 7:
            raise ValueError("count 7 is unlucky")
        return self


def _error(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Model(**values)
    return info.value


def test_explain_words_each_bound_with_its_operator_and_the_value_given() -> None:
    assert explain(_error(rate_hz=-1.0)) == "rate_hz: must be > 0.0 (got -1.0)"
    assert explain(_error(count=0)) == "count: must be >= 1 (got 0)"
    assert explain(_error(share=2.0)) == "share: must be <= 1.0 (got 2.0)"
    assert explain(_error(inner={"depth": 10})) == "inner.depth: must be < 10 (got 10)"
    assert explain(_error(rate_hz=0.0, count=0)) == "rate_hz: must be > 0.0 (got 0.0); count: must be >= 1 (got 0)"


def test_explain_keeps_other_messages_and_drops_the_value_error_prefix_of_a_model_level_error() -> None:
    assert explain(_error(count="x")).startswith("count: Input should be a valid integer")
    assert explain(_error(count="x")).endswith("(got 'x')")
    assert explain(_error(count=7)) == "count 7 is unlucky"


def test_explain_answers_an_unknown_key_with_the_closest_known_ones_or_the_model() -> None:
    known = ["rate_hz", "rate_hx", "count"]
    assert explain(_error(rate_hy=1), known) == "rate_hy: unknown key (did you mean rate_hz or rate_hx?)"
    assert explain(_error(nothing_alike=1), known) == "nothing_alike: unknown key (no such setting in Model)"
    assert explain(_error(rate_hy=1)) == "rate_hy: unknown key (no such setting in Model)"


def test_explain_only_reports_the_names_asked_for_and_leaves_model_level_errors_out() -> None:
    exc = _error(rate_hz=-1.0, count=0)
    assert explain(exc, only=["count"]) == "count: must be >= 1 (got 0)"
    assert explain(exc, only=[]) == ""
    assert explain(_error(count=7), only=["count"]) == ""


class StrictInner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int = 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rate_hz: float = 1.0
    count: int = 1
    flag: bool = False
    inner: StrictInner = StrictInner()


def test_an_unknown_key_is_answered_with_at_most_the_two_closest_names() -> None:
    with pytest.raises(ValidationError) as info:
        Strict(rate_hy=1)
    assert explain(info.value, ["rate_hz", "rate_hx", "rate_hq"]) == (
        "rate_hy: unknown key (did you mean rate_hz or rate_hx?)")


def test_an_unknown_key_in_a_nested_block_is_matched_by_its_own_name_not_the_blocks() -> None:
    with pytest.raises(ValidationError) as info:
        Strict(inner={"dpeth": 2})
    assert explain(info.value, ["depth", "inner"]) == "inner.dpeth: unknown key (did you mean depth?)"


def test_every_unknown_key_is_reported_not_only_the_first() -> None:
    with pytest.raises(ValidationError) as info:
        Strict(rate_hy=1, cuont=2, rate_hz=0.5)
    assert explain(info.value, ["rate_hz", "count"]) == (
        "rate_hy: unknown key (did you mean rate_hz?); cuont: unknown key (did you mean count?)")


def test_only_an_unknown_key_is_worded_as_one_other_errors_keep_their_own_message() -> None:
    with pytest.raises(ValidationError) as info:
        Strict(flag="maybe")  # bool_parsing: a type that sorts before extra_forbidden
    assert explain(info.value, ["flag"]) == (
        "flag: Input should be a valid boolean, unable to interpret input (got 'maybe')")

def test_one_line_joins_non_blank_stripped_lines() -> None:
    assert one_line("  first \n\n second\n   \nthird  ") == "first; second; third"
    assert one_line("single") == "single"
    assert one_line("") == ""


# ----- ros_params -----------------------------------------------------------------------------------------
class Nested(BaseModel):
    topic: str = Field("/t", description="a topic")


class Params(BaseModel):
    rate_hz: float = Field(20.0, gt=0, le=1000, description="the rate")
    horizon: float = Field(1.0, ge=0.5)
    below: float = Field(0.0, lt=3.0)
    ticks: int = Field(2, ge=1)
    ceiling: int = Field(2, le=9)
    free: float = 1.0
    mode: Literal["naive", "rtc"] = "naive"
    level: Literal[1, 2] = 1
    flag: bool = False
    path: Path = Path(".")
    names: list[str] = Field(default_factory=list)
    gains: list[float] = Field(default_factory=list)
    counts: list[int] = Field(default_factory=list)
    switches: list[bool] = Field(default_factory=list)
    nested: Nested = Nested()


FIELDS = dict(model_fields(Params))


def test_parameter_types_follow_the_annotation() -> None:
    expected = {"rate_hz": PT.PARAMETER_DOUBLE, "ticks": PT.PARAMETER_INTEGER, "mode": PT.PARAMETER_STRING,
                "level": PT.PARAMETER_INTEGER, "flag": PT.PARAMETER_BOOL, "path": PT.PARAMETER_STRING,
                "names": PT.PARAMETER_STRING_ARRAY, "gains": PT.PARAMETER_DOUBLE_ARRAY,
                "counts": PT.PARAMETER_INTEGER_ARRAY, "switches": PT.PARAMETER_BOOL_ARRAY,
                "nested.topic": PT.PARAMETER_STRING}
    assert {n: parameter_type(FIELDS[n].annotation) for n in expected} == expected



def test_a_single_valued_literal_is_a_parameter_of_its_values_type() -> None:
    assert parameter_type(Literal["rgb"]) == PT.PARAMETER_STRING and parameter_type(Literal[3]) == PT.PARAMETER_INTEGER

def test_model_fields_flattens_nested_models_with_a_dotted_prefix() -> None:
    names = [n for n, _ in model_fields(Params)]
    assert names[0] == "rate_hz" and names[-1] == "nested.topic" and "nested" not in names
    assert [n for n, _ in model_fields(Nested, "x.")] == ["x.topic"]


def test_a_double_bounded_both_sides_gets_exactly_its_bounds_and_their_text() -> None:
    d = descriptor("rate_hz", FIELDS["rate_hz"], read_only=False)
    assert d.name == "rate_hz" and d.type == PT.PARAMETER_DOUBLE and d.description == "the rate"
    assert not d.read_only and d.additional_constraints == "> 0; <= 1000"
    (r,) = d.floating_point_range
    assert (r.from_value, r.to_value, r.step) == (0.0, 1000.0, 0.0)
    assert not d.integer_range


def test_an_open_side_of_a_double_range_is_finite_so_infinity_is_refused() -> None:
    (low,) = descriptor("horizon", FIELDS["horizon"], read_only=False).floating_point_range
    assert (low.from_value, low.to_value) == (0.5, FLOAT_BOUND) and FLOAT_BOUND == 1e308
    (high,) = descriptor("below", FIELDS["below"], read_only=False).floating_point_range
    assert (high.from_value, high.to_value) == (-FLOAT_BOUND, 3.0)
    assert all(math.isfinite(v) for v in (low.from_value, low.to_value, high.from_value, high.to_value))


def test_an_integer_range_has_its_bound_and_the_int64_limit_on_the_open_side() -> None:
    (r,) = descriptor("ticks", FIELDS["ticks"], read_only=False).integer_range
    assert (r.from_value, r.to_value, r.step) == (1, INT_BOUND, 0) and INT_BOUND == 2**63 - 1
    (c,) = descriptor("ceiling", FIELDS["ceiling"], read_only=False).integer_range
    assert (c.from_value, c.to_value) == (-INT_BOUND, 9)
    assert not descriptor("ticks", FIELDS["ticks"], read_only=False).floating_point_range


def test_an_unbounded_field_has_no_range_and_no_constraint_text() -> None:
    d = descriptor("free", FIELDS["free"], read_only=False)
    assert not d.floating_point_range and not d.integer_range and d.additional_constraints == ""
    assert d.description == "free"  # no Field description: the name



class Switch(BaseModel):
    on: bool = Field(False, le=1)


def test_only_a_bounded_double_or_integer_gets_a_range() -> None:
    level = descriptor("level", FIELDS["level"], read_only=False)  # an integer (Literal[1, 2]), no bound
    assert not level.integer_range and not level.floating_point_range
    on = descriptor("on", Switch.model_fields["on"], read_only=False)  # a bound, but a bool
    assert on.type == PT.PARAMETER_BOOL and on.additional_constraints == "<= 1"
    assert not on.integer_range and not on.floating_point_range

def test_literals_list_their_values_and_read_only_says_when_it_is_set() -> None:
    d = descriptor("mode", FIELDS["mode"], read_only=True)
    assert d.read_only and d.additional_constraints == f"one of: naive, rtc; {READ_ONLY_TEXT}"
    assert READ_ONLY_TEXT == "read-only: set at start-up (params file, launch argument or -p)"
    assert descriptor("ticks", FIELDS["ticks"], read_only=True).additional_constraints == f">= 1; {READ_ONLY_TEXT}"


def test_rclpy_refuses_infinity_for_a_one_sided_double_with_the_shared_descriptor() -> None:
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    ctx = Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("descriptor_probe", context=ctx)
    try:
        node.declare_parameter("horizon", 1.0, descriptor("horizon", FIELDS["horizon"], read_only=False))
        assert not node.set_parameters([Parameter("horizon", value=math.inf)])[0].successful
        assert node.set_parameters([Parameter("horizon", value=1e300)])[0].successful
        assert node.set_parameters([Parameter("horizon", value=0.5)])[0].successful
        assert not node.set_parameters([Parameter("horizon", value=0.4)])[0].successful
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)


@pytest.mark.parametrize("ptype, value, expected", [
    (PT.PARAMETER_DOUBLE, 20, 20.0),
    (PT.PARAMETER_DOUBLE, True, True),
    (PT.PARAMETER_DOUBLE, 2.5, 2.5),
    (PT.PARAMETER_STRING, 1, "1"),
    (PT.PARAMETER_STRING, False, False),
    (PT.PARAMETER_INTEGER, 3, 3),
    (PT.PARAMETER_DOUBLE_ARRAY, [1, 2], [1.0, 2.0]),
    (PT.PARAMETER_DOUBLE_ARRAY, array("q", [1, 2]), [1.0, 2.0]),
    (PT.PARAMETER_DOUBLE_ARRAY, [1, 2.5], [1, 2.5]),
    (PT.PARAMETER_DOUBLE_ARRAY, [True, 1], [True, 1]),
    (PT.PARAMETER_INTEGER_ARRAY, [1, 2], [1, 2]),
    (PT.PARAMETER_STRING_ARRAY, [1, 2], [1, 2]),
    (PT.PARAMETER_INTEGER_ARRAY, 3, 3),
])
def test_coerce_reads_yaml_integers_as_the_declared_type(ptype: int, value: object, expected: object) -> None:
    out = coerce(ptype, value)
    assert out == expected and type(out) is type(expected)
    if isinstance(expected, list):
        assert [type(v) for v in out] == [type(v) for v in expected]


def test_plain_turns_rclpy_arrays_and_tuples_into_lists_and_leaves_the_rest() -> None:
    assert plain(array("d", [1.0, 2.0])) == [1.0, 2.0] and type(plain(array("d", [1.0]))) is list
    assert plain((1, 2)) == [1, 2]
    keep = [1, 2]
    assert plain(keep) is keep and plain("a") == "a" and plain(3) == 3


def test_unknown_overrides_hints_the_nearest_name_and_lists_all_only_without_one() -> None:
    known = ["rate_hz", "command_timeout_s", "use_sim_time"]
    assert unknown_overrides(["rate_hz", "qos_overrides./x.publisher.depth"], known) is None
    assert unknown_overrides(["comand_timeout_s"], known) == (
        "unknown parameter(s) 'comand_timeout_s' (did you mean 'command_timeout_s'?)")
    assert unknown_overrides(["zzz", "rate_hx"], known) == (
        "unknown parameter(s) 'rate_hx' (did you mean 'rate_hz'?), 'zzz'; "
        "known parameters: command_timeout_s, rate_hz, use_sim_time")
    assert unknown_overrides(["zzz"], known + known).endswith("known parameters: command_timeout_s, rate_hz, "
                                                              "use_sim_time")


# ----- rt ------------------------------------------------------------------------------------------------------
def test_realtime_priority_asks_fifo_reset_on_fork_at_the_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda pid, policy, param: calls.append((pid, policy, param)))
    assert rt.set_realtime_priority(42) == "SCHED_FIFO 42"
    ((pid, policy, param),) = calls
    assert pid == 0 and policy == os.SCHED_FIFO | getattr(os, "SCHED_RESET_ON_FORK", 0)
    assert param.sched_priority == 42


def test_realtime_priority_without_privilege_or_support_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError("Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert rt.set_realtime_priority(60) == "SCHED_FIFO 60 unavailable (Operation not permitted); normal priority"
    monkeypatch.delattr(os, "sched_setscheduler")
    assert rt.set_realtime_priority(5).startswith("SCHED_FIFO 5 unavailable (")



def test_realtime_priority_where_the_os_has_no_reset_on_fork_asks_plain_fifo(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda pid, policy, param: calls.append(policy))
    monkeypatch.delattr(os, "SCHED_RESET_ON_FORK", raising=False)
    assert rt.set_realtime_priority(10) == "SCHED_FIFO 10" and calls == [os.SCHED_FIFO]

class FakeTime:
    """A clock that moves `spin` per read (a busy-wait makes progress) and by the slept time plus `oversleep`."""

    def __init__(self, spin: float = 1 / 1024) -> None:
        self.t = 0.0
        self.spin = spin
        self.oversleep = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        self.t += self.spin
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s + self.oversleep


def test_ticker_deadlines_are_absolute_and_it_sleeps_to_spin_s_before_each() -> None:
    ft = FakeTime(spin=0.0)
    ticker = rt.DeadlineTicker(0.25, ft.clock, ft.sleep, spin_s=0.125)
    assert ticker.deadline == 0.0
    ft.spin = 1 / 1024
    for k in range(1, 4):
        start = ft.t
        late = ticker.wait()
        assert ticker.deadline == 0.25 * k  # no drift from the spin or the wake-up
        assert ft.sleeps[-1] == pytest.approx(0.25 * k - start - 1 / 1024 - 0.125)
        assert 0 <= late < 2 / 1024
    assert ticker.ticks == 3 and ticker.missed == 0


def test_ticker_does_not_sleep_when_the_deadline_is_closer_than_spin_s() -> None:
    ft = FakeTime()
    ticker = rt.DeadlineTicker(0.25, ft.clock, ft.sleep, spin_s=0.25)
    start = ticker.deadline
    ticker.wait()
    assert ft.sleeps == [] and ticker.deadline == start + 0.25 and ft.t >= start + 0.25


def test_a_late_wake_up_skips_to_the_newest_deadline_and_counts_the_missed_ones() -> None:
    ft = FakeTime(spin=0.0)
    ticker = rt.DeadlineTicker(0.25, ft.clock, ft.sleep, spin_s=0.0)
    ft.oversleep = 0.625  # 2.5 periods late
    late = ticker.wait()
    assert ticker.missed == 2 and ticker.deadline == 0.75 and late == pytest.approx(0.125)
    assert ticker.max_lateness == pytest.approx(0.125)
    ft.oversleep = 0.25  # exactly one period late: that deadline is missed too
    late = ticker.wait()
    assert ticker.missed == 3 and ticker.deadline == 1.25 and late == 0.0
    ft.oversleep = 0.0625
    assert ticker.wait() == pytest.approx(0.0625) and ticker.missed == 3 and ticker.deadline == 1.5
    assert ticker.max_lateness == pytest.approx(0.125) and ticker.ticks == 3


def test_recent_lateness_is_p99_and_max_of_the_last_window() -> None:
    ft = FakeTime(spin=0.0)
    ticker = rt.DeadlineTicker(1.0, ft.clock, ft.sleep, spin_s=0.0, window=4)
    assert ticker.recent_lateness() == (0.0, 0.0)
    for over in (0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625):
        ft.oversleep = over
        ticker.wait()
    # the last four: 0.125, 0.0625, 0.03125, 0.015625; p99 index int(0.99 * 3) = 2 of the sorted ones
    assert ticker.recent_lateness() == pytest.approx((0.0625, 0.125))
    assert ticker.max_lateness == pytest.approx(0.5)
    few = rt.DeadlineTicker(1.0, ft.clock, ft.sleep, spin_s=0.0, window=100)
    ft.oversleep = 0.25
    few.wait()
    assert few.recent_lateness() == pytest.approx((0.25, 0.25))



def test_a_fresh_ticker_reports_no_lateness_no_ticks_and_no_misses() -> None:
    ft = FakeTime()
    ticker = rt.DeadlineTicker(0.25, ft.clock, ft.sleep)
    assert (ticker.max_lateness, ticker.ticks, ticker.missed, ticker.recent_lateness()) == (0.0, 0, 0, (0.0, 0.0))


def test_the_lateness_window_keeps_the_newest_wake_ups_however_often_it_wraps() -> None:
    ft = FakeTime(spin=0.0)
    ticker = rt.DeadlineTicker(1.0, ft.clock, ft.sleep, spin_s=0.0, window=2)
    for over in (0.5, 0.25, 0.375, 0.125, 0.0625, 0.03125, 0.015625):
        ft.oversleep = over
        ticker.wait()
    assert ticker.recent_lateness() == (0.015625, 0.03125) and ticker.ticks == 7


def test_p99_of_a_hundred_wake_ups_is_the_second_largest() -> None:
    ft = FakeTime(spin=0.0)
    ticker = rt.DeadlineTicker(1.0, ft.clock, ft.sleep, spin_s=0.0, window=100)
    for k in range(100):
        ft.oversleep = (k * 37 % 100) / 128  # each of 0/128 .. 99/128 once, out of order
        ticker.wait()
    assert ticker.recent_lateness() == (98 / 128, 99 / 128)  # sorted index int(0.99 * 99) = 98

def test_ticker_refuses_a_period_or_window_it_cannot_keep() -> None:
    for period in (0.0, -1.0):
        with pytest.raises(ValueError, match="period must be > 0"):
            rt.DeadlineTicker(period)
    with pytest.raises(ValueError, match="window must be >= 1"):
        rt.DeadlineTicker(0.1, window=0)
    assert rt.DeadlineTicker(0.1, window=1).recent_lateness() == (0.0, 0.0)
    assert rt.SPIN_S == 0.0005 and rt.LATENESS_WINDOW == 1000


# ----- interrupt ----------------------------------------------------------------------------------------------
def test_the_flag_raises_only_on_the_first_signal_before_rclpy_and_while_armed() -> None:
    flag = SigintFlag()
    assert (flag.seen, flag.armed, flag.ros_started) == (False, True, False)
    with pytest.raises(KeyboardInterrupt):
        flag._handler(2, None)
    flag._handler(2, None)
    assert flag.seen
    for attr in ("armed", "ros_started"):
        other = SigintFlag()
        setattr(other, attr, attr == "ros_started")
        other._handler(15, None)
        assert other.seen


def test_interrupted_tells_a_stop_from_a_real_error() -> None:
    flag = SigintFlag()
    assert flag.interrupted(KeyboardInterrupt())
    assert not flag.interrupted(RuntimeError("x")) and flag.interrupted(RuntimeError("x"), context_shut_down=True)
    assert not flag.interrupted(ValueError("x"), context_shut_down=True)
    flag.seen = True
    assert flag.interrupted(RuntimeError("x")) and not flag.interrupted(ValueError("x"))


_ROS_MAIN = """
import json, sys, rclpy
from omni_vla_safety.interrupt import ros_main
events = []
case = sys.argv[1]
def before():
    events.append(("before_init", rclpy.ok()))
try:
    with ros_main([], [lambda: events.append(("cleanup", rclpy.ok()))], before_init=before) as flag:
        events.append(("body", rclpy.ok(), flag.ros_started))
        if case != "clean":
            raise {"interrupt": KeyboardInterrupt, "runtime": RuntimeError, "value": ValueError}[case]("x")
    events.append(("after", rclpy.ok()))
except Exception as exc:
    events.append(("raised", type(exc).__name__, rclpy.ok()))
print(json.dumps(events))
"""


@pytest.mark.parametrize("case, last", [
    ("clean", ["after", False]), ("interrupt", ["after", False]),
    ("runtime", ["raised", "RuntimeError", False]), ("value", ["raised", "ValueError", False]),
])
def test_ros_main_runs_before_init_first_cleans_up_and_lets_only_real_errors_out(case: str, last: list) -> None:
    out = subprocess.run([sys.executable, "-c", _ROS_MAIN, case], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    events = json.loads(out.stdout.strip().splitlines()[-1])
    assert events == [["before_init", False], ["body", True, True], ["cleanup", True], last]


# The other ways a body ends (argv renames the node, so a run that ignores it shows)
_ROS_MAIN_STOPS = """
import json, os, signal, sys, time, rclpy
from rclpy.executors import ExternalShutdownException
from omni_vla_safety.interrupt import ros_main
case = sys.argv[1]
events = []
def before():
    if case == "failed start":
        raise ValueError("bad setting")
def cleanup():
    if case == "failed start":
        os.kill(os.getpid(), signal.SIGTERM)  # the first stop signal arrives while the failed start-up cleans up
        time.sleep(0.2)
    events.append("cleanup")
signals = case != "rclpy's signal handling off"
options = {} if signals else {"rclpy_signals": False}
try:
    with ros_main(["node", "--ros-args", "-r", "__node:=renamed"], [cleanup], before_init=before, **options) as flag:
        node = rclpy.create_node("probe")
        events.append(node.get_name())
        node.destroy_node()
        if case == "external shutdown":
            raise ExternalShutdownException()
        if case in ("stop signal, then a runtime error", "rclpy's signal handling off"):
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and not (flag.seen and rclpy.ok() != signals):
                time.sleep(0.01)
            events.append("context " + ("up" if rclpy.ok() else "shut down"))
            if signals:
                raise RuntimeError("failed to take a message")
        if case == "context shut down, then a runtime error":
            rclpy.shutdown()  # rclpy's signal thread shut it down; the flag has not seen the signal yet
            raise RuntimeError("the given context is not valid")
    events.append("returned")
except Exception as exc:
    events.append(type(exc).__name__)
print(json.dumps(events))
"""


@pytest.mark.parametrize("case, events", [
    ("external shutdown", ["renamed", "cleanup", "returned"]),
    ("stop signal, then a runtime error", ["renamed", "context shut down", "cleanup", "returned"]),
    ("rclpy's signal handling off", ["renamed", "context up", "cleanup", "returned"]),
    ("context shut down, then a runtime error", ["renamed", "cleanup", "returned"]),
    ("failed start", ["cleanup", "ValueError"]),
])
def test_ros_main_passes_its_argv_to_rclpy_and_ends_cleanly_on_a_stop_however_it_surfaces(case: str,
                                                                                           events: list) -> None:
    """By default rclpy's own handler shuts the context down on a stop signal; with rclpy_signals=False only the
    flag sees it. A failed start-up still runs its whole cleanup when the first stop signal lands in it, and its
    error still propagates."""
    out = subprocess.run([sys.executable, "-c", _ROS_MAIN_STOPS, case], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == events, out.stderr[-2000:]


_EXIT = """
import os, sys
from omni_vla_safety.interrupt import exit_process
case = sys.argv[1]
print("printed", end="")
sys.stderr.write("written")
if case == "stdout closed":
    sys.stdout.close()
elif case == "stdout's reader gone":
    sys.stdout.flush()
    r, w = os.pipe()
    os.close(r)
    sys.stdout = os.fdopen(w, "w")
    print("lost")
exit_process(3)
"""


@pytest.mark.parametrize("case", ["clean", "stdout closed", "stdout's reader gone"])
def test_exit_process_flushes_what_it_can_and_exits_with_the_code(case: str) -> None:
    """A stdout that cannot be flushed (closed, or its reader gone) neither stops stderr's flush nor the exit."""
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a launched node's output is
    out = subprocess.run([sys.executable, "-c", _EXIT, case], capture_output=True, text=True, timeout=60,
                         env=buffered)
    assert (out.returncode, out.stdout, out.stderr) == (3, "printed", "written")


def test_spin_until_stopped_polls_every_tenth_of_a_second_by_default() -> None:
    import threading

    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    from omni_vla_safety.interrupt import spin_until_stopped

    ctx = Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("poll_probe", context=ctx)
    flag = SigintFlag()
    try:
        threading.Timer(0.3, lambda: setattr(flag, "seen", True)).start()
        t0 = time.monotonic()
        spin_until_stopped(node, flag, executor=SingleThreadedExecutor(context=ctx))
        took = time.monotonic() - t0
        assert ctx.ok() and 0.3 <= took < 0.8, took
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
