"""Argument types shared by subcommands (argparse names the option in front of their messages)."""

from __future__ import annotations

import argparse


def positive_seconds(text: str) -> float:
    """A duration in seconds, > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0 seconds")
    return value
