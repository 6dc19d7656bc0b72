"""The one loop assembly: what build_loop refuses, what its tick commands, what closing the loop stops, and
that nobody else wires a loop."""
from __future__ import annotations

import ast
import time
from pathlib import Path

import numpy as np
import pytest

from controller_rig import PERIOD, FakeReplanner, obs, row
from omni_vla.core.assembly import Loop, build_loop
from omni_vla.core.settings import LoopSettings, VlaNodeConfig, node_settings
from omni_vla.inference.client import SyncInference
from toy_runtime import ToyRuntime

REPO = Path(__file__).resolve().parents[2]
PANDA = [f"panda_joint{i}" for i in range(1, 8)] + ["panda_finger_joint1"]


class NamedRuntime(ToyRuntime):
    """The toy runtime, naming its joints as a bundle's manifest does."""

    joint_names = PANDA


def loop(names: list[str] | None = None, delay: int = 1) -> Loop:
    settings = LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4, joint_names=names or PANDA)
    return build_loop(settings, SyncInference(NamedRuntime(), delay_ticks=delay, period_s=PERIOD))


def test_joints_the_policy_does_not_have_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match=r"unknown joint names \['elbow'\]"):
        loop(PANDA[:-1] + ["elbow"])


def test_the_policys_joints_in_another_order_are_refused() -> None:
    """The action vector is in the policy's order: a permuted list would label every action wrongly."""
    with pytest.raises(ValueError, match="in its order"):
        loop(PANDA[::-1])


def test_tick_holds_until_the_first_chunk_then_commands_the_loops_own_buffer() -> None:
    lp = loop(delay=1)
    assert lp.step(obs(1.0), 0) is None and lp.commands == 0
    command = lp.step(obs(1.0), 1)
    assert command is lp.command and command[0] == pytest.approx(row(1.0, 1))
    assert lp.commands == 1


def test_real_time_tick_reads_the_store_under_its_lock() -> None:
    lp = loop(delay=0)
    lp.store.set_instruction("pick up the cube")
    img = np.zeros((128, 128, 3), np.uint8)
    lp.store.put_image("front", img, "rgb8")
    lp.store.put_image("wrist", img, "rgb8")
    lp.store.put_joints(PANDA, [0.5] * 8, [0.0] * 8)
    command = lp.tick(0, time.perf_counter())  # the store stamps arrivals on perf_counter
    assert command is not None and command[0] == pytest.approx(row(0.5, 0))


def test_eval_defaults_are_read_from_the_nodes_parameter_file() -> None:
    from omni_vla_sim.eval import NODE, EvalSettings

    node = node_settings(REPO / "config" / "vla_node.yaml")
    settings = EvalSettings(backend="expert")
    assert isinstance(NODE, VlaNodeConfig)
    assert (settings.strategy, settings.execution_horizon, settings.noise_scale, settings.splice_blend_ticks) == (
        node.strategy, node.execution_horizon, node.noise_scale, node.splice_blend_ticks)
    assert node.splice_blend_ticks == 3  # the node's file, not the model's neutral 0


def test_only_the_assembly_constructs_a_controller() -> None:
    """vla_node, eval and bench loop must run build_loop's loop, not wire their own."""
    offenders = []
    for folder in ("omni_vla", "sim", "policies"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Controller":
                    offenders.append(str(path.relative_to(REPO)))
    assert offenders == ["omni_vla/core/assembly.py"]


@pytest.mark.parametrize("module", ["omni_vla/ros/assembly.py", "sim/agents.py", "omni_vla/tools/bench_loop.py"])
def test_node_eval_and_bench_build_their_loop_with_build_loop(module: str) -> None:
    tree = ast.parse((REPO / module).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "build_loop"]
    assert calls, f"{module} does not call build_loop"


def test_runtime_that_does_not_name_its_joints_is_assembled() -> None:
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), SyncInference(ToyRuntime(), 0, PERIOD))
    assert lp.step(obs(1.0), 0) is not None and lp.commands == 1


@pytest.mark.parametrize("swap", [(0, 1), (6, 7)])
def test_any_swap_of_the_policys_joints_is_refused(swap: tuple[int, int]) -> None:
    names = list(PANDA)
    i, j = swap
    names[i], names[j] = names[j], names[i]
    with pytest.raises(ValueError, match="in its order"):
        loop(names)


def test_closing_the_loop_stops_the_replanner_and_the_inference_client() -> None:
    class Recording(SyncInference):
        closes = 0

        def close(self) -> None:
            self.closes += 1

    rp = FakeReplanner()
    inf = Recording(ToyRuntime(), 0, PERIOD)
    lp = build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), inf, rp)
    lp.close()
    assert (rp.closes, inf.closes) == (1, 1)
    bare = Recording(ToyRuntime(), 0, PERIOD)
    build_loop(LoopSettings(rate_hz=1 / PERIOD, execution_horizon=4), bare).close()
    assert bare.closes == 1
