"""The kit's shipped data, importable as ``swa_kit.data`` (``swa_kit/data`` links here); see ``swa_kit.resources``."""
