"""DDS domain claims: two processes on one machine never get the same domain, and a dead holder frees its own."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from omni_vla.tools import domains

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from omni_vla.tools import domains
    domains.LOCK_DIR, domains.FIRST, domains.LAST = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    print(*[domains.claim_domain() for _ in range(int(sys.argv[4]))], flush=True)
    sys.stdin.read()
""")


@pytest.fixture()
def small_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(domains, "LOCK_DIR", tmp_path / "locks")
    monkeypatch.setattr(domains, "FIRST", 150)
    monkeypatch.setattr(domains, "LAST", 155)
    held: list[tuple[int, int]] = []
    pinned: list[tuple[int, int]] = []
    monkeypatch.setattr(domains, "_held", held)
    monkeypatch.setattr(domains, "_pinned", pinned)
    yield tmp_path / "locks"
    for _, fd in held + pinned:
        os.close(fd)


def _holder(lock_dir: Path, count: int) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), "150", "155", str(count)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, {int(d) for d in proc.stdout.readline().split()}


def test_a_domain_another_live_process_holds_is_never_handed_out(small_pool: Path) -> None:
    proc, theirs = _holder(small_pool, 4)
    try:
        assert len(theirs) == 4
        mine = {domains.claim_domain(), domains.claim_domain()}
        assert mine == set(range(150, 156)) - theirs
        with pytest.raises(domains.NoFreeDomain, match="no free DDS domain in 150..155"):
            domains.claim_domain()
    finally:
        proc.communicate("")


def test_a_dead_holders_domains_are_free_again(small_pool: Path) -> None:
    proc, theirs = _holder(small_pool, 6)
    proc.communicate("")
    assert len(theirs) == 6
    assert len({domains.claim_domain() for _ in range(6)}) == 6


def test_a_process_releases_its_oldest_claim_past_keep(small_pool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(domains, "KEEP", 2)
    first = domains.claim_domain()
    domains.claim_domain()
    domains.claim_domain()
    assert first not in {d for d, _ in domains._held}
    proc, theirs = _holder(small_pool, 4)
    proc.communicate("")
    assert first in theirs


def test_a_pinned_claim_outlives_any_number_of_later_claims(small_pool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's or a module's domain, claimed first, is not released by the per-test claims after it."""
    monkeypatch.setattr(domains, "KEEP", 1)
    pinned = domains.claim_domain(pin=True)
    for _ in range(5):
        assert domains.claim_domain() != pinned
    proc, theirs = _holder(small_pool, 4)
    proc.communicate("")
    assert pinned not in theirs and len(theirs) == 4


def test_the_lock_directory_is_shared_by_every_user(small_pool: Path) -> None:
    domains.claim_domain()
    assert stat.S_IMODE(small_pool.stat().st_mode) == 0o1777


def test_a_process_started_on_a_claimed_domain_keeps_it_claimed_after_this_one_lets_go(small_pool: Path) -> None:
    """A graph outliving its starter (a killed test run) keeps its domain: the lock descriptor goes with it."""
    domain = domains.claim_domain()
    graph = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             pass_fds=domains.lock_fds(domain), text=True)
    try:
        os.close(domains._held.pop()[1])  # this process lets go (a KEEP rollover, or its end)
        proc, theirs = _holder(small_pool, 5)
        proc.communicate("")
        assert domain not in theirs and len(theirs) == 5
    finally:
        graph.communicate("")
    proc, theirs = _holder(small_pool, 6)
    proc.communicate("")
    assert domain in theirs, "free again once the graph has ended"
