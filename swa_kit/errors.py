"""The kit's exceptions.

Each one subclasses the builtin a caller would naturally catch (``ValueError``,
``IndexError``, ``RuntimeError``), so ``except ValueError`` keeps working, while
``except SwaKitError`` catches everything the kit raises on purpose.
"""

from __future__ import annotations


class SwaKitError(Exception):
    """Base class of every error the kit raises deliberately."""


class WindowConventionError(SwaKitError, ValueError):
    """A window value that is not valid in the convention it was given in."""


class MaskError(SwaKitError, ValueError):
    """Mask arguments that describe no valid attention pattern."""


class PoolExhaustedError(SwaKitError, RuntimeError):
    """A KV pool could not serve an allocation."""


class PoolUsageError(SwaKitError, ValueError):
    """A pool call whose arguments do not fit the pool (page alignment, lengths, missing SWA loc)."""


class SlotError(SwaKitError, IndexError):
    """A slot id that is not allocated, out of range, or the reserved dummy slot."""


class LayerMappingError(SwaKitError, KeyError):
    """A layer id that the pool's ``layers_mapping`` does not know."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class DispatchGuardError(SwaKitError, ValueError):
    """A route that would silently drop a sliding window or read untranslated slots."""


class PathUnavailableError(SwaKitError, RuntimeError):
    """An attention path that cannot run here, or cannot run this input (the message names the way out)."""


class SGLangUnavailableError(SwaKitError, RuntimeError):
    """SGLang is not installed here, or the module of it the kit reads does not import."""


class ModelConfigError(SwaKitError, ValueError):
    """A model spec in data/models that is missing, malformed or inconsistent."""


class UsageError(SwaKitError, ValueError):
    """An argument a kit function does not accept (unknown name, out-of-range count, mismatched lengths)."""


class BudgetError(SwaKitError, ValueError):
    """Work whose estimated memory or time passes this machine's limit (see :mod:`swa_kit.budget`)."""


class LaunchRefusedError(UsageError):
    """A launch SGLang itself refuses at start-up (its argument resolution raises), so the kit refuses it too."""


class NotModelledError(LaunchRefusedError):
    """A launch SGLang serves that sets a surface the kit does not model: refused by name rather than guessed."""
