"""swa_kit.tables: aligned plain-text and Markdown tables of dict rows, checked against cells counted by hand."""

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


def test_markdown_rows_by_hand_with_a_pipe_escaped():
    rows = [{"decision": "page_size", "value": 1}, {"decision": "guard", "value": "a | b"}]
    assert format_table(rows, markdown=True).splitlines() == [
        "| decision | value |",
        "| --- | --- |",
        "| page_size | 1 |",
        "| guard | a \\| b |",
    ]


def test_random_markdown_cells_read_back():
    """A Markdown table split on its unescaped pipes gives back every cell, written by ``cell``."""
    rng = random.Random()
    columns = [f"c{i}" for i in range(rng.randint(1, 5))]
    rows = [{c: rng.choice(["", "x", "a|b", "||", "1.5", "(3, -1)"]) + str(rng.randint(0, 99)) for c in columns}
            for _ in range(rng.randint(1, 8))]
    lines = format_table(rows, columns, markdown=True, cell=lambda v: f"<{v}>").splitlines()
    assert len(lines) == len(rows) + 2 and lines[1] == "|" + " --- |" * len(columns)
    for line, row in zip(lines[2:], rows):
        cells = [c.strip().replace("\0", "|") for c in line[1:-1].replace("\\|", "\0").split("|")]
        assert cells == [f"<{row[c]}>" for c in columns]


def test_cell_writes_every_value_but_a_missing_one():
    rows = [{"a": 1, "b": 2}, {"a": 3}]
    assert format_table(rows, ["a", "b"], cell=lambda v: f"{v:,}!").splitlines() == ["a   b ", "--  --", "1!  2!",
                                                                                       "3!    "]
