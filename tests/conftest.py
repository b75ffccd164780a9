"""Shared test set-up: headless matplotlib, a fixed hypothesis profile, fresh random seeds."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "kit", deadline=None, max_examples=int(os.environ.get("SWA_KIT_EXAMPLES", "60")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kit")
