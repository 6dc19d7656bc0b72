"""Where the inference worker runs: the CPUs and nice value the settings name reach the worker process
and every thread its runtime makes (read back from the kernel), and a bad CPU list is refused in one line."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from toy_runtime import toy_factory
from omni_vla.core.cpu_list import format_cpu_list, parse_cpu_list
from omni_vla.core.settings import WorkerSettings
from omni_vla.inference.worker import ProcessInference

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, cpus", [
    ("", set()), ("  ", set()), ("1", {1}), ("0,1", {0, 1}), ("2-5", {2, 3, 4, 5}), ("2-5, 7", {2, 3, 4, 5, 7}),
    ("3-3", {3}), ("1,1", {1}),
])
def test_cpu_lists_read_as_taskset_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text, named", [("a", "'a'"), ("1-", "'1-'"), ("-1", "'-1'"), ("5-2", "'5-2'"),
                                         ("1,,2", "''"), ("1.5", "'1.5'")])
def test_malformed_cpu_list_is_refused_naming_the_bad_part(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_cpu_list(text)
    with pytest.raises(ValidationError, match="worker_cpus"):
        WorkerSettings(worker_cpus=text)


@pytest.mark.parametrize("cpus, text", [({0}, "0"), ({0, 1, 2, 5}, "0-2,5"), ({1, 3}, "1,3"), ({4, 5, 6}, "4-6")])
def test_cpu_lists_print_compactly_and_read_back(cpus: set[int], text: str) -> None:
    assert format_cpu_list(cpus) == text
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("nice", [-1, 20])
def test_nice_outside_zero_to_nineteen_is_refused(nice: int) -> None:
    with pytest.raises(ValidationError, match="worker_nice"):
        WorkerSettings(worker_nice=nice)


def test_cpu_the_process_may_not_use_is_refused_before_anything_starts() -> None:
    allowed = os.sched_getaffinity(0)
    absent = max(allowed) + 1
    with pytest.raises(ValueError, match=f"CPU\\(s\\) {absent} .*expected a subset of {format_cpu_list(allowed)}"):
        ProcessInference.from_settings("toy", "toy:", 1, WorkerSettings(worker_cpus=f"{absent}"), factory=toy_factory)


def _threads_of(pid: int) -> dict[int, tuple[set[int], int]]:
    """Thread id -> (affinity, nice) of every thread of `pid`, from the kernel."""
    out = {}
    for tid in (int(t) for t in os.listdir(f"/proc/{pid}/task")):
        nice = int((Path(f"/proc/{pid}/task/{tid}/stat").read_text().rpartition(")")[2].split())[16])
        out[tid] = (frozenset(os.sched_getaffinity(tid)), nice)
    return out


def test_default_worker_runs_where_and_as_the_node_does() -> None:
    client = ProcessInference.from_settings("toy", "toy:", 1, WorkerSettings(), factory=toy_factory).start()
    try:
        mine = (frozenset(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))
        assert set(_threads_of(client.pid).values()) == {mine}
    finally:
        client.close()


def test_worker_and_every_runtime_thread_run_on_the_named_cpu_at_the_added_nice() -> None:
    """The shipped bundle on MNN at 2 threads: its pool threads are made after the placement, so they inherit it."""
    bundle = REPO / "bundles" / "reference"
    mine = os.sched_getaffinity(0)
    cpu = max(mine)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    settings = WorkerSettings(worker_cpus=str(cpu), worker_nice=7)
    client = ProcessInference.from_settings("mnn", str(bundle), 2, settings).start()
    try:
        client.set_instruction("pick up the red cube")
        client.submit(0, 0, 0.0)
        threads = _threads_of(client.pid)
        assert len(threads) >= 2
        assert set(threads.values()) == {(frozenset({cpu}), min(base + 7, 19))}
        assert os.sched_getaffinity(0) == mine, "the node itself is not pinned"
        assert os.getpriority(os.PRIO_PROCESS, 0) == base
    finally:
        client.close()
