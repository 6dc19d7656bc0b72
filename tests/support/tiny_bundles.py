"""Real exported tiny bundles for tests that need a policy on disk, built once per test session."""
from __future__ import annotations

import pytest

_BUNDLES: dict[tuple[str, ...], object] = {}


def tiny_bundle(tmp_path_factory: pytest.TempPathFactory, backends: tuple[str, ...] = ("mnn",)):
    """A real exported tiny bundle (tests/support/fixtures_policy.py), built once per test session."""
    if backends not in _BUNDLES:
        from fixtures_policy import make_tiny_bundle

        _BUNDLES[backends] = make_tiny_bundle(tmp_path_factory.mktemp("tiny") / "bundle", backends=backends)
    return _BUNDLES[backends]
