"""For the SGLang-facing tests: import SGLang's modules, or fail (under CI=true) / skip (elsewhere) saying why.

A test against SGLang that silently skips compares nothing; CI installs SGLang (.ci/run), so there a
module that does not import is a failure, never a skip.
"""

from __future__ import annotations

import os
from typing import Any

import pytest


def require_sglang(*modules: str) -> list[Any]:
    """The imported modules; fails the test module under ``CI=true`` when any does not import, else skips."""
    from swa_kit.deploy.sglang_oracle import import_sglang
    from swa_kit.errors import BackendUnavailableError

    try:
        return [import_sglang(name) for name in modules]
    except BackendUnavailableError as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but SGLang cannot be read, so this module would compare nothing: {error}",
                        pytrace=False)
        pytest.skip(str(error), allow_module_level=True)
