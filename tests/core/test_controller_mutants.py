"""Controller edges cosmic-ray found unpinned (results/mutation_core.md).

`Controller.update` must refuse any change to a setting the queue and buffers were built from (in
either direction) and accept a settings object that differs only in live settings, however it was built;
a chunk the controller did not request (left in flight in its inference client) is never executed.
"""
from __future__ import annotations

import pytest

from omni_vla.core.settings import LoopSettings
from omni_vla.core.controller import Controller
from omni_vla.inference.client import SyncInference
from test_inference import ToyRuntime
from test_loop_controller import PERIOD, make, obs


def test_live_update_refuses_a_larger_fixed_setting_as_well_as_a_smaller_one() -> None:
    ctl, _ = make(delay=0, s=4)
    with pytest.raises(ValueError, match="execution_horizon cannot change while the loop runs: reconfigure"):
        ctl.update(ctl.config.model_copy(update={"execution_horizon": 8}))
    assert ctl.config.execution_horizon == 4


def test_live_update_accepts_an_equal_settings_object_built_afresh() -> None:
    ctl, _ = make(delay=0, s=4, max_obs_age_s=0.2)
    fresh = LoopSettings(**{**ctl.config.model_dump(), "max_obs_age_s": 0.5})
    assert fresh is not ctl.config and fresh.joint_names is not ctl.config.joint_names
    ctl.update(fresh)
    o = obs(1.0)
    o["stamps"] = {"front": 0.0, "wrist": 0.0, "joints": 0.0}
    assert ctl.step(o, 8, 0.4) is not None and ctl.state == "OK"
    assert ctl.step(o, 12, 0.6) is None and ctl.reason == "front camera image older than max_obs_age_s=0.5 s"


def test_a_chunk_this_controller_never_requested_is_discarded_not_executed() -> None:
    rt = ToyRuntime(record=True)
    inf = SyncInference(rt, delay_ticks=1, period_s=PERIOD)
    inf.submit(0, 0, 0.0)  # left in flight by an earlier owner of the client
    ctl = Controller(LoopSettings(execution_horizon=4, rate_hz=1 / PERIOD), inf)
    ctl.set_instruction("pick up the cube")
    assert ctl.step(obs(1.0), 1, PERIOD) is None
    assert ctl.counts["discarded_chunks"] == 1 and ctl.counts["chunks"] == 0


def test_a_chunk_left_in_flight_is_counted_as_discarded_even_on_a_first_tick_without_instruction() -> None:
    inf = SyncInference(ToyRuntime(), delay_ticks=0, period_s=PERIOD)
    inf.submit(0, 0, 0.0)
    ctl = Controller(LoopSettings(execution_horizon=4, rate_hz=1 / PERIOD), inf)
    assert ctl.step(obs(1.0, instruction=None), 0, 0.0) is None and ctl.reason == "no instruction yet"
    assert ctl.counts["discarded_chunks"] == 1 and ctl.counts["chunks"] == 0
