"""The re-planner's network side in its own process: the tick's process runs no websocket or
msgpack code, a killed network process is noticed and restarted, and close() leaves nothing behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from omni_vla.cloud.hosts import FrameSlots
from omni_vla.cloud.replanner import Replanner
from omni_vla_sim.openpi_server import PolicyServer
from openpi_rig import Tick, config, make_obs, ramp_server, wait_for  # noqa: F401

TICK_PROCESS = r"""
import json, os, sys, time
import numpy as np
from omni_vla.cloud.config import ReplanConfig
from omni_vla.cloud.replanner import Replanner
cfg = ReplanConfig.model_validate({"enabled": True, "client": {"uri": sys.argv[1]},
    "triggers": {"stall_window_s": 0, "intervention_count": 0, "cadence_s": 0}})
obs = {"front": np.full((16, 16, 3), 7, np.uint8), "wrist": np.full((16, 16, 3), 9, np.uint8),
       "qpos": np.full(8, 0.2), "instruction": "pick up the red cube"}
with Replanner(cfg) as rp:
    t0 = time.perf_counter()
    rp.request_plan()
    rp.observe(obs, 0, t0)
    plan = None
    while plan is None and time.perf_counter() - t0 < 10:
        plan = rp.poll(time.perf_counter(), 0)
        time.sleep(0.005)
    loaded = sorted(m for m in ("websockets", "msgpack", "cv2", "asyncio") if m in sys.modules)
    print(json.dumps({"rows": None if plan is None else plan.actions.shape[0],
                      "first": None if plan is None else float(plan.actions[0, 0]),
                      "loaded": loaded, "child": rp._host.pid, "me": os.getpid()}))
"""


def test_the_tick_process_never_loads_the_websocket_or_msgpack_code(ramp_server):
    _, st = ramp_server
    out = subprocess.run([sys.executable, "-c", TICK_PROCESS, st.uri], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["rows"] == 20 and abs(res["first"] - 0.2) < 1e-6  # RampPolicy: row 0 = the state sent
    assert res["child"] != res["me"]
    assert "websockets" not in res["loaded"] and "msgpack" not in res["loaded"], res["loaded"]


def test_a_killed_network_process_is_restarted_and_plans_resume(ramp_server):
    _, st = ramp_server
    with Replanner(config(st.uri)) as rp:
        t = Tick(rp)
        t.request()
        assert t.poll_until(5.0) is not None
        old = rp._host.pid
        os.kill(old, signal.SIGKILL)
        assert wait_for(lambda: rp.counts["network_restarts"] == 1, 5.0)
        assert "died" in rp.last_error and not rp.busy
        assert t.poll() is None  # nothing half-received comes out
        assert wait_for(lambda: rp.connected, 10.0)
        assert rp._host.pid not in (None, old)
        t.request(make_obs(0.4))
        plan = t.poll_until(5.0)
        assert plan is not None and abs(plan.actions[0, 0] - (0.4 + 0.01 * plan.skipped)) < 1e-6
        t.assert_polls_were_fast()


def test_close_stops_the_network_process_and_its_threads(ramp_server):
    _, st = ramp_server
    rp = Replanner(config(st.uri)).start()
    assert wait_for(lambda: rp.connected, 10.0)
    proc = rp._host._proc
    rp.close()
    assert not proc.is_alive()
    assert not any(th.name in ("openpi-events", "openpi-network") for th in threading.enumerate())


class FrontMeanPolicy:
    """Every action = the mean of the front image it was sent: shows which frame reached the server."""

    metadata = {"action_horizon": 20, "action_dim": 8}

    def reset(self) -> None:
        pass

    def infer(self, obs: dict) -> dict:
        return {"actions": np.full((20, 8), float(np.mean(obs["observation/image"])))}


@pytest.mark.parametrize("network", ["process", "thread"])
def test_the_frames_sent_are_those_of_the_trigger_tick_even_if_the_caller_reuses_its_buffers(network):
    with PolicyServer(FrontMeanPolicy()).thread() as st, Replanner(config(st.uri, network=network)) as rp:
        t = Tick(rp)
        obs = make_obs()
        t.request(obs)  # front is all 7s
        obs["front"][:] = 200  # the camera callback reuses the buffer right after the tick
        plan = t.poll_until(5.0)
        assert plan is not None and np.all(plan.actions == 7.0), plan


def test_frame_slots_detect_a_slot_overwritten_before_it_was_read():
    slots = FrameSlots(((4, 4, 3), (2, 2, 3)))
    try:
        reader = FrameSlots(slots.shapes, name=slots.shm.name)
        a = [np.full((4, 4, 3), 1, np.uint8), np.full((2, 2, 3), 2, np.uint8)]
        seq0 = slots.write(0, a)
        seq1 = slots.write(1, [x + 10 for x in a])
        got = reader.read(0, seq0)
        assert got is not None and all(np.array_equal(g, x) for g, x in zip(got, a))
        assert reader.read(1, seq1)[0][0, 0, 0] == 11
        newer = slots.write(0, [x + 20 for x in a])
        assert reader.read(0, seq0) is None  # overwritten: the old request's frames are gone
        assert reader.read(0, newer)[1][0, 0, 0] == 22
        reader.close()
    finally:
        slots.close(unlink=True)
