"""For the SGLang-facing tests: import SGLang's modules, or fail (where SGLang is required) / skip saying why.

A test against SGLang that silently skips compares nothing. CI runs these tests in a venv that holds SGLang
(.ci/run) with ``SWA_KIT_REQUIRE_SGLANG=1``: there a module that does not import is a failure, never a skip.
Elsewhere (the README's test command, CI's main venv, which deselects them) they skip with the reason.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

REQUIRE_SGLANG = "SWA_KIT_REQUIRE_SGLANG"


def require_sglang(*modules: str) -> list[Any]:
    """The imported modules; fails the test module under ``SWA_KIT_REQUIRE_SGLANG=1`` when any does not import,
    else skips."""
    from swa_kit.launch.sglang_oracle import import_sglang
    from swa_kit.errors import SGLangUnavailableError

    try:
        return [import_sglang(name) for name in modules]
    except SGLangUnavailableError as error:
        if os.environ.get(REQUIRE_SGLANG) == "1":
            pytest.fail(f"{REQUIRE_SGLANG}=1 but SGLang cannot be read, so this module would compare nothing: "
                        f"{error}", pytrace=False)
        pytest.skip(str(error), allow_module_level=True)
