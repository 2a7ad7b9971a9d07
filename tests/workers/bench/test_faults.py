"""The fault harness's parts that need no stack (the scenarios themselves run against real
processes in tests/integration/test_multi_worker.py): every scenario the command line names
is one the harness plays, and the table reads as docs/faults.md keeps it."""

import pytest

from workers.bench.faults import play
from workers.bench.faults.rows import Row, table


def test_every_named_scenario_is_played_in_order():
    assert list(play._scenarios()) == list(play.NAMES)


def test_an_unknown_scenario_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit):
        play.main(["--folder", "/nonexistent", "--checkout", "/nonexistent", "--only", "no-such-fault"])
    assert "invalid choice: 'no-such-fault'" in capsys.readouterr().err


def test_the_table_has_a_row_per_scenario_and_a_dash_where_nothing_recovered():
    rows = [Row("a", "did", "fine", 0, 0, 1.26), Row("b", "see the error", "did not complete: x", -1, -1, None)]
    lines = table(rows).splitlines()
    assert lines[2] == "| a | did | fine | 0 | 0 | 1.3 |"
    assert lines[3].endswith("| -1 | -1 | – |")
