"""The exit status of every ``swa-kit`` command: one table, used by every command and shown in ``--help``."""

from __future__ import annotations

from enum import IntEnum

#: Set to 1 to have a crash print its traceback under the one-line report.
DEBUG_ENV = "SWA_KIT_DEBUG"


class ExitCode(IntEnum):
    """What a ``swa-kit`` exit status means; each member carries the line ``--help`` shows for it."""

    meaning: str

    def __new__(cls, value: int, meaning: str) -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    OK = 0, "ok"
    DISAGREES = 1, ("a measured result disagrees (probe, tour), findings above info (audit), or something the kit "
                    "cannot run without is missing (doctor)")
    BAD_INPUT = 2, "bad input, or work over this machine's limit (one line on stderr)"
    REFUSED = 3, "refused by a guard (explain)"
    CANNOT_MEASURE = 4, "nothing could be measured here (bench without a GPU, probe with no runnable path)"
    CRASHED = 70, (f"the kit crashed: a bug in swa-kit, not a finding (one line on stderr; {DEBUG_ENV}=1 adds the "
                   "traceback)")
    INTERRUPTED = 130, "interrupted (Ctrl-C)"


def epilog() -> str:
    """The table as ``swa-kit --help`` prints it."""
    return "exit status:\n" + "\n".join(f"  {int(code):<4}{code.meaning}" for code in ExitCode)
