"""Shared test set-up: headless EGL rendering, DDS isolation per test run, the lowering cache, and the import path.

Tests live in folders mirroring the packages (core/, runtime/, inference/, cloud/, ros/, safety/, sim/,
policies/, tools/); what more than one test module uses (doubles such as ToyRuntime, rigs, fixtures) lives in
support/, and no test module imports another. Only support/ goes on sys.path, so its modules import by their
names from any folder, and a worker process spawned from a test can import a factory from them (spawn passes
sys.path on). A folder's own helpers (safety/'s fuzzer and oracle) are found because pytest puts the folder of
the test module it imports on sys.path.
"""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
# A DDS domain claimed machine-wide for this pytest run (xdist workers inherit the controller's), so concurrent runs
# never cross-talk; tests that start graphs claim their own (tests/support/rosutil.free_domain_id).
if "ROS_DOMAIN_ID" not in os.environ:
    from omni_vla.tools.domains import FIRST, LAST, claim_domain

    try:
        os.environ["ROS_DOMAIN_ID"] = str(claim_domain(pin=True))
    except OSError as exc:  # no lock directory (a read-only /tmp): unclaimed, as before claims existed
        print(f"conftest: DDS domain unclaimed ({exc})", file=sys.stderr)
        os.environ["ROS_DOMAIN_ID"] = str(random.randint(FIRST, LAST))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
# ExecuTorch lowerings served from a cache keyed by everything they depend on (policies/lowering_cache.py): most of
# an import's time, and the same program whenever the graph, weights, delegate, versions and lowering code are.
# An empty value turns it off.
os.environ.setdefault("OMNI_VLA_LOWERING_CACHE", str(Path(os.environ.get("OMNI_VLA_CACHE", Path.home() / ".cache"
                                                                       / "omni_vla")) / "lowering"))

_SUPPORT = str(Path(__file__).resolve().parent / "support")
if _SUPPORT not in sys.path:
    sys.path.append(_SUPPORT)


# Tests that bring up ROS graphs or hold a real-time rate: `make test` runs them after the parallel part, alone, so
# a parallel worker never competes with what they measure (the rest runs on both cores under pytest-xdist).
# (tools/test_bench_loop.py is not one: it checks the report's own consistency, not the figures.)
SERIAL = ("ros/", "cloud/test_openpi_reliability.py", "cloud/test_network_process.py", "core/test_loop.py",
          "core/test_loop_controller.py", "core/test_time_and_live_settings.py", "inference/test_inference.py",
          "inference/test_worker_placement.py")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes tens of seconds; still runs in CI")
    config.addinivalue_line("markers", "serial: runs alone after the parallel part (conftest.SERIAL)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).resolve().parent
    for item in items:
        if item.path.relative_to(tests).as_posix().startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def tiny_vla(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """SmolVLA's architecture at test size, exported once per run as a kind-"vla" bundle: (model, bundle dir).
    Builds with torch (the 3.11 suite; tests/support/vla_bundle.py)."""
    from vla_bundle import tiny_vla as build, tiny_vla_bundle  # optional: torch, only the 3.11 suite builds it

    model = build()
    return model, tiny_vla_bundle(model, tmp_path_factory.mktemp("vla"))
