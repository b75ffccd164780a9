"""Argument types shared by subcommands (argparse names the option in front of their messages)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from swa_kit import budget
from swa_kit.errors import BudgetError


def positive_seconds(text: str) -> float:
    """A duration in seconds, > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds > 0")
    return value


def _size(text: str) -> int:
    try:
        return budget.parse_size(text)
    except BudgetError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _seconds(text: str) -> float:
    try:
        return budget.parse_seconds(text)
    except BudgetError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    """``--max-memory`` and ``--max-seconds``: raise (or lower) the limits of :mod:`swa_kit.budget` for this run."""
    parser.add_argument("--max-memory", type=_size, metavar="SIZE",
                        help=f"refuse work estimated above SIZE, e.g. 16GiB (default: ${budget.MEMORY_ENV}, else "
                             "half this machine's memory)")
    parser.add_argument("--max-seconds", type=_seconds, metavar="SECONDS",
                        help=f"refuse work estimated to take longer (default: ${budget.SECONDS_ENV}, else "
                             f"{budget.DEFAULT_SECONDS:g})")


def bounded_int(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number in ``[minimum, maximum]``, refused in one line otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {minimum}..{maximum}")
        return value

    return parse


def device(text: str) -> str:
    """An argparse type: a torch device this machine has (``cpu``, ``cuda``, ``cuda:1``), refused with the reason."""
    import torch

    try:
        parsed = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device: give cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA/ROCm support" if torch.version.cuda is None and
                   torch.version.hip is None else "no GPU is visible to torch")
            raise argparse.ArgumentTypeError(f"{text!r} is not available: {why} ({torch.__version__}); "
                                             "use --device cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text!r} is not available: {torch.cuda.device_count()} GPU(s) "
                                             "visible; use cuda:0")
    elif parsed.type != "cpu":
        raise argparse.ArgumentTypeError(f"{text!r}: the kit runs on cpu or cuda (ROCm GPUs are cuda in torch)")
    return text


def output_file(text: str) -> str:
    """An argparse type: a file path to write (not a folder, in a folder that exists)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file name inside it")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: folder {str(path.parent)!r} does not exist")
    return text


def input_file(text: str) -> str:
    """An argparse type: a readable file (not a folder)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular file (a device, FIFO or socket): give a file")
    return text
