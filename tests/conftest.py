"""Hypothesis profiles and the ``redis`` marker.

The fixtures that start processes (``redis_url``, ``redis_cluster``, ``mtawindows_server``,
``mtawindows_server_factory``, ``mtawindows_cluster``) come from the testing kit's pytest
plugin, :mod:`mtawindows.testing.pytest_plugin` (registered by the package's ``pytest11``
entry point): this file must not define fixtures of those names.

Profiles: ``ci`` (default, bounded for a 2-core CI box), ``fast`` (``make test-fast``) and
``thorough`` (local soak):
``HYPOTHESIS_PROFILE=thorough .venv/bin/pytest --timeout 0 tests/engine/test_engine_state_machine.py``
(about half an hour).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=400,
    stateful_step_count=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(  # make test-fast: a quick look while working
    "fast",
    max_examples=15,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the ``redis_url`` fixture talks to a real Redis: mark it ``redis``
    (modules that start servers mark themselves with ``pytestmark``)."""
    for item in items:
        if "redis_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.redis)
