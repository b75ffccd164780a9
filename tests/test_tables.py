"""swa_kit.tables: aligned plain-text tables of dict rows, checked against widths counted by hand."""

from __future__ import annotations

import random

import numpy as np
import torch

from swa_kit.tables import format_table, plain, print_table


def test_columns_are_as_wide_as_their_widest_cell_and_left_aligned():
    rows = [{"name": "sglang", "value": 1023}, {"name": "flash_attn", "value": (1023, 0)}]
    lines = format_table(rows).splitlines()
    assert lines == [
        "name        value    ",
        "----------  ---------",
        "sglang      1023     ",
        "flash_attn  [1023, 0]",
    ]


def test_columns_pick_and_order_and_a_missing_cell_is_empty():
    rows = [{"a": 1, "b": 2, "c": 3}, {"a": 10, "c": 30}]
    assert format_table(rows, ["c", "b"]).splitlines() == ["c   b", "--  -", "3   2", "30   "]


def test_random_rows_line_up():
    rng = random.Random()
    columns = ["x", "longer_name", "z"]
    rows = [{c: "#" * rng.randint(0, 12) for c in columns} for _ in range(rng.randint(1, 9))]
    lines = format_table(rows, columns).splitlines()
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in columns]
    assert len(lines) == len(rows) + 2 and {len(line) for line in lines} == {sum(widths) + 2 * (len(columns) - 1)}
    for line, row in zip(lines[2:], rows):
        start = 0
        for c, w in zip(columns, widths):
            assert line[start:start + w] == row[c].ljust(w)
            start += w + 2


def test_no_rows_says_so(capsys):
    assert format_table([]) == "(no rows)"
    print_table([], ["a"])
    assert capsys.readouterr().out == "(no rows)\n"


def test_scalars_of_numpy_and_torch_read_as_python_numbers(capsys):
    assert plain({1: (np.int64(3), [torch.tensor(2.5)])}) == {"1": [3, [2.5]]}
    print_table([{"n": np.int64(7), "t": torch.tensor(True)}])
    assert capsys.readouterr().out.splitlines()[2] == "7  True"
