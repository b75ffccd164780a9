"""The table of attention paths: every row's functions exist where it says, and what they compute agrees with what
the row declares. (Listing the table imports none of them: tests/test_light_imports.py.)"""

from __future__ import annotations

import dataclasses
import inspect
import pkgutil
import random

import pytest
import torch

from swa_kit.attention.batch import random_paged_batch
from swa_kit.attention.paths import PATHS, all_paths, get_path
from swa_kit.errors import PathUnavailableError, UsageError
from swa_kit.tiers import TIERS
from swa_kit.window import from_keys


@pytest.mark.parametrize("name", list(PATHS))
def test_a_rows_functions_resolve_and_take_what_the_table_passes(name):
    path = get_path(name)
    for where in (path.availability, path.implementation):
        function = pkgutil.resolve_name(where)
        module, _, attribute = where.partition(":")
        assert callable(function) and function.__module__ == module and function.__name__ == attribute, where
    inspect.signature(pkgutil.resolve_name(path.availability)).bind()
    inspect.signature(pkgutil.resolve_name(path.implementation)).bind("batch", "window_arg")
    ok, reason = path.available()
    assert isinstance(ok, bool) and isinstance(reason, str) and reason


@pytest.mark.parametrize("name", [p.name for p in all_paths() if "cpu" in p.devices and p.available()[0]])
def test_a_path_that_runs_here_names_itself_as_its_row_does(name):
    """A result names the path and tier its row declares, in a mode the row declares, on fresh random input."""
    path = get_path(name)
    q_len = 1 if "decode" in path.modes else 3
    keys = random.randint(2, 6)
    batch = random_paged_batch([q_len, q_len], [q_len + 9, q_len + 4], num_q_heads=4, num_kv_heads=2, head_dim=64,
                               page_size=16 if path.kv_layout == "block_table" else 1,
                               generator=torch.Generator().manual_seed(random.randrange(2**31)))
    window_arg = from_keys(path.convention, keys if path.honours_window else None) if path.convention else None
    result = path.run(batch, window_arg)
    assert (result.path, result.tier) == (path.name, path.tier)
    assert result.out.shape == batch.q.shape and torch.isfinite(result.out).all()


def test_the_table_lists_every_path_once_by_name():
    names = [p.name for p in all_paths()]
    assert names == sorted(PATHS) and len(set(names)) == len(names) >= 11
    assert {p.tier for p in all_paths()} <= set(TIERS)


def test_a_malformed_row_is_refused_by_name():
    row = get_path("reference")
    with pytest.raises(UsageError, match="path 'reference': unknown tier 'fast'; one of"):
        dataclasses.replace(row, tier="fast")
    for bad in ("swa_kit.attention.reference.available", "numpy:zeros", "swa_kit.attention.reference:"):
        with pytest.raises(UsageError, match=f"availability '{bad}' is not 'swa_kit.attention.<module>:<function>'"):
            dataclasses.replace(row, availability=bad)


def test_an_unknown_path_lists_the_known_ones():
    with pytest.raises(PathUnavailableError, match="unknown attention path 'fast'; known: aiter_emulated_mha_batch"):
        get_path("fast")
