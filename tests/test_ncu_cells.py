"""benchmarks/ncu_cells.py reads Nsight Compute's raw CSV page into the notes' columns: numbers with thousands
separators, stall reasons ranked, DRAM bytes over the least a kernel must read, and what one warp issues."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def ncu_cells():
    return load_script("ncu_cells")


def _raw_row(ncu_cells, **values: str) -> dict[str, str]:
    """A raw-page row as ncu's CSV gives it: every metric a string, unmeasured ones empty."""
    row = dict.fromkeys(ncu_cells.METRICS, "")
    return {**row, "Kernel Name": "_swa_attend_kernel", **values}


def test_a_kernel_row_is_read_into_the_notes_columns(ncu_cells) -> None:
    stall = ncu_cells.STALL_PREFIX + "{}" + ncu_cells.STALL_SUFFIX
    row = _raw_row(ncu_cells, **{
        "smsp__inst_executed.sum": "946,688", "smsp__warps_launched.sum": "256", "dram__bytes_read.sum": "3,000",
        "dram__bytes_write.sum": "1,000", "sm__cycles_active.avg": "5,000", "sm__cycles_elapsed.max": "10,000",
        stall.format("wait"): "1.5", stall.format("long_scoreboard"): "0.75", stall.format("barrier"): "0",
        stall.format("not_issued"): "9"})
    out = ncu_cells.summarise(row, {"cell": "B8", "mode": "decode", "least_bytes": 2000})
    assert out["instructions_per_warp"] == pytest.approx(946_688 / 256)
    assert out["dram_over_least"] == pytest.approx(2.0)
    assert out["sm_active_avg_of_elapsed"] == pytest.approx(0.5)
    assert list(out["stalls_per_issue"].items()) == [("wait", 1.5), ("long_scoreboard", 0.75)]  # no zeros, no total


def test_a_counter_ncu_did_not_report_leaves_its_column_out(ncu_cells) -> None:
    out = ncu_cells.summarise(_raw_row(ncu_cells, **{"smsp__inst_executed.sum": "1,000"}), {"least_bytes": 0})
    assert out["smsp__warps_launched.sum"] is None
    assert "instructions_per_warp" not in out and out["dram_over_least"] is None


def test_the_printed_table_shows_a_missing_counter_as_a_dash(ncu_cells) -> None:
    row = {"gpu__time_duration.sum": 7740.0, "instructions_per_warp": 0.0}  # measured zero stays a number
    cells = ncu_cells.table_numbers(row).split()
    assert len(cells) == len(ncu_cells.COLUMNS)
    assert cells[0] == "7.7" and cells[-1] == "0" and cells[1:-1] == ["-"] * (len(ncu_cells.COLUMNS) - 2)
