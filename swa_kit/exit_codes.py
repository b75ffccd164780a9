"""The exit status of every ``swa-kit`` command: one table, used by every command and shown in ``--help``."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a ``swa-kit`` exit status means."""

    OK = 0  # the command did what it was asked, and every measured result agreed
    DISAGREES = 1  # a measurement disagrees with what was intended (probe, tour), or an audit has findings
    BAD_INPUT = 2  # a bad argument, file or device, or work too big for this machine: one line on stderr
    REFUSED = 3  # a guard refused the plan (explain): the output says which and why
    CANNOT_MEASURE = 4  # nothing could be measured here (no GPU, no runnable path): the output says why
    INTERRUPTED = 130  # Ctrl-C


def epilog() -> str:
    """The table as ``swa-kit --help`` prints it."""
    lines = {ExitCode.OK: "ok",
             ExitCode.DISAGREES: "a measured result disagrees (probe, tour), or findings above info (audit)",
             ExitCode.BAD_INPUT: "bad input, or work over this machine's limit (one line on stderr)",
             ExitCode.REFUSED: "refused by a guard (explain)",
             ExitCode.CANNOT_MEASURE: "nothing could be measured here (bench without a GPU, probe with no "
                                      "runnable path)",
             ExitCode.INTERRUPTED: "interrupted (Ctrl-C)"}
    return "exit status:\n" + "\n".join(f"  {int(code):<4}{text}" for code, text in lines.items())
