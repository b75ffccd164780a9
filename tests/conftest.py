"""Shared test set-up: headless matplotlib, a fixed hypothesis profile, fresh random seeds."""

from __future__ import annotations

import hashlib
import os

import matplotlib
import pytest

matplotlib.use("Agg")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "kit", deadline=None, max_examples=int(os.environ.get("SWA_KIT_EXAMPLES", "60")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kit")


@pytest.fixture(autouse=True)
def _own_config_cache(monkeypatch, tmp_path_factory, request):
    """Each test its own cache of config reads (swa_kit.models.transformers_reads), made only when written: a
    record one test leaves must not answer for another test, nor land in the user's cache."""
    name = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv("SWA_KIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "config-cache" / name))
