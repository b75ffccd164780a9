"""A known vLLM bug's launch, as the corpus holds it, replayed through ``swa-kit audit --engine vllm``'s findings.

A corpus entry with ``"engine": "vllm"`` (:mod:`swa_kit.measure.bugs`) holds its launch as ``vllm serve`` would
take it: ``model`` (a bundled model name, or a config.json's fields as an object), ``server_args`` (the ``vllm
serve`` flags as typed, ``--speculative-config`` JSON included; ``""`` for none), ``env`` (vLLM's variables the kit
reads), ``vllm_version`` (``0.34.0`` or ``before-<N>``: 0.34.0 with vLLM PR #N's change undone, one of
:data:`~swa_kit.vllm_versions.REVERTIBLE_FIXES`), ``platform`` (a ROCm platform the vLLM audit models) and
optionally ``note`` and ``draft_model`` (the drafter's config.json fields as an object, what ``--draft-hf-config``
reads). The launch is read here by the vLLM audit's own readers, so a value the audit refuses is
refused in the corpus too, by field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from swa_kit.errors import UsageError
from swa_kit.launch.vllm_args import merged_env, parse_vllm_flags, vllm_env
from swa_kit.launch.vllm_drafter import read_drafter
from swa_kit.launch.vllm_plan import VLLM_PLATFORMS, VllmPlan, plan
from swa_kit.measure.audit import Finding
from swa_kit.measure.vllm_audit import audit_vllm
from swa_kit.models.configs import load_model, parse_hf_config
from swa_kit.vllm_versions import VLLM_VERSIONS

#: The launch's keys (every one required but ``note``).
VLLM_LAUNCH_KEYS = {"model", "server_args", "env", "vllm_version", "platform", "note", "draft_model"}


@dataclass(frozen=True)
class VllmLaunchSpec:
    model: str | Mapping[str, Any]
    server_args: str
    env: Mapping[str, str]
    vllm_version: str
    platform: str
    note: str = ""
    draft_model: Mapping[str, Any] | None = None

    @property
    def version(self) -> str:
        """The engine version the launch is replayed at."""
        return self.vllm_version


class LaunchFieldError(UsageError):
    """A launch value the vLLM audit refuses: ``field`` names it (``launch.server_args``), ``problem`` says why."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"field {field!r}: {problem}")
        self.field, self.problem = field, problem


def check_launch(spec: VllmLaunchSpec) -> None:
    """Read the launch as the vLLM audit does; raises :class:`LaunchFieldError` on the first value it refuses."""
    if spec.vllm_version not in VLLM_VERSIONS:
        raise LaunchFieldError("launch.vllm_version", f"{spec.vllm_version[:80]!r} is not one of "
                                                      f"{', '.join(VLLM_VERSIONS)}")
    if spec.platform not in VLLM_PLATFORMS:
        raise LaunchFieldError("launch.platform", f"{spec.platform[:80]!r} is not one of {', '.join(VLLM_PLATFORMS)}")
    try:
        args = parse_vllm_flags(spec.server_args)
    except UsageError as error:
        raise LaunchFieldError("launch.server_args", str(error)) from None
    try:
        vllm_env(merged_env(args, dict(spec.env)))
    except UsageError as error:
        raise LaunchFieldError("launch.env", str(error)) from None


def build_plan(spec: VllmLaunchSpec, where: str, vllm_version: str | None = None) -> VllmPlan:
    """The launch planned by the vLLM audit (at ``vllm_version`` instead of the launch's, when given)."""
    model = load_model(spec.model) if isinstance(spec.model, str) else \
        parse_hf_config(dict(spec.model), where=f"{where} launch.model")
    drafter = None if spec.draft_model is None else \
        read_drafter(dict(spec.draft_model), f"{where} launch.draft_model")
    return plan(model, parse_vllm_flags(spec.server_args), dict(spec.env), spec.platform,
                vllm_version=vllm_version or spec.vllm_version, drafter=drafter)


def findings(spec: VllmLaunchSpec, where: str, vllm_version: str | None = None) -> list[Finding]:
    """``swa-kit audit --engine vllm``'s findings on the launch."""
    return audit_vllm(build_plan(spec, where, vllm_version)).findings
