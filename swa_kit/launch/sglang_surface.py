"""The SWA surface of the installed SGLang, listed from its own code: what :data:`swa_kit.launch.surface.SURFACE`
must name, so a new release cannot drift unnoticed (``tests/test_sglang_drift.py``).

* server arguments: every ``ServerArgs`` field whose name or help matches :data:`PATTERN`;
* SWA pools: every class under ``sglang/srt`` that subclasses ``BaseSWAKVPool``, directly or not, found in the
  source text by its bases' names (importing every pool module would need a GPU for some);
* attention backends: ``attention_registry.ATTENTION_BACKENDS``;
* speculative algorithms: the ``SpeculativeAlgorithm`` enum.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from swa_kit.errors import SGLangUnavailableError
from swa_kit.launch.sglang_oracle import import_sglang

PATTERN = re.compile(r"swa|window|sliding|hybrid|speculative|draft|page|memory", re.IGNORECASE)
POOL_BASE = "BaseSWAKVPool"
# A class statement and its bases (a regular expression reads the whole tree in a fraction of ast's time).
_CLASS = re.compile(r"^\s*class\s+(\w+)\s*\(([^)]*)\)\s*:", re.MULTILINE)


def server_args() -> list[str]:
    """``ServerArgs`` fields whose name or help mentions :data:`PATTERN`."""
    server_args_module, arg_utils = (import_sglang(m) for m in ("sglang.srt.server_args",
                                                                  "sglang.srt.arg_groups.arg_utils"))
    cls = server_args_module.ServerArgs
    hints = typing.get_type_hints(cls, include_extras=True)
    found = []
    for field in arg_utils.record_fields(cls):
        hint = hints.get(field.name)
        meta = arg_utils._unwrap_annotated(hint)[1] if hint is not None else None
        text = f"{field.name} {getattr(meta, 'help', None) or ''}"
        if PATTERN.search(text):
            found.append(field.name)
    if not found:
        raise SGLangUnavailableError("no ServerArgs field read: SGLang's argument declarations have changed shape")
    return found


def swa_pools(root: Path | None = None) -> list[str]:
    """Classes under ``root`` (SGLang's ``srt`` package) that subclass :data:`POOL_BASE`, by their bases' names."""
    if root is None:
        root = Path(next(iter(import_sglang("sglang.srt").__path__)))  # a namespace package: no __file__
    bases: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for name, parents in _CLASS.findall(text):
            bases.setdefault(name, set()).update(p.strip().rsplit(".", 1)[-1] for p in parents.split(","))
    if POOL_BASE not in bases:
        raise SGLangUnavailableError(f"no class {POOL_BASE} under {root}: SGLang's pools have moved")
    found, grew = {POOL_BASE}, True
    while grew:
        new = {name for name, parents in bases.items() if parents & found} - found
        found |= new
        grew = bool(new)
    return sorted(found - {POOL_BASE})


def attention_backends() -> list[str]:
    """The names ``--attention-backend`` resolves through SGLang's registry."""
    return sorted(import_sglang("sglang.srt.layers.attention.attention_registry").ATTENTION_BACKENDS)


def spec_algorithms() -> list[str]:
    """The members of SGLang's ``SpeculativeAlgorithm``."""
    return [a.name for a in import_sglang("sglang.srt.speculative.spec_info").SpeculativeAlgorithm]


def read_surface() -> dict[str, list[str]]:
    """Every SWA surface of the installed SGLang, by kind (the kinds of :data:`swa_kit.launch.surface.KINDS`)."""
    return {"server_arg": server_args(), "swa_pool": swa_pools(), "attention_backend": attention_backends(),
            "spec_algorithm": spec_algorithms()}
