"""The repository's benchmark and tuning scripts, run from a checkout (not shipped in the wheel)."""
