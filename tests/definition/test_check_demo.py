"""check_demo's count of a settled demo: every primary cell on its joint word (the demo asks an
objective), the primary metric's own word only for a cell without one."""

from experiments.management.commands.check_demo import UNSETTLED, cell_word, run_line, summary


def _cell(outcome: str, joint: str | None = None) -> dict:
    return {"arm": "draft", "level": 1, "outcome": outcome} | ({"joint": {"word": joint}} if joint else {})


def test_the_joint_word_counts_where_a_cell_has_one():
    # Faster on the primary metric, but a guard not shown yet: the demo's answer is still open.
    assert cell_word(_cell("faster", "open")) == "open"
    assert cell_word(_cell("faster", "pays")) == "pays"
    assert cell_word(_cell("not worth it", "not worth it")) == "not worth it"
    assert cell_word(_cell("slower")) == "slower"


def test_only_pays_costs_and_not_worth_it_settle_a_joint_cell():
    settled = [w for w in ("pays", "costs", "not worth it", "open", "inconclusive") if w not in UNSETTLED]

    assert settled == ["pays", "costs", "not worth it"]


def test_the_summary_counts_runs_with_every_cell_settled():
    rows = [
        {"settled": True, "wall_s": 600, "server_starts": 10, "words": {"draft @ 1": "pays", "ngram @ 1": "costs"}},
        {"settled": False, "wall_s": 900, "server_starts": 12, "words": {"draft @ 1": "pays", "ngram @ 1": "open"}},
    ]

    lines = summary(rows)

    assert lines[0] == "every primary cell settled in 1 of 2 runs (50%)"
    assert "median 12.5 min, longest 15.0 min" in lines[1]
    assert "  draft @ 1: settled in 2 of 2 (pays, pays)" in lines
    assert "  ngram @ 1: settled in 1 of 2 (costs, open)" in lines


def test_a_run_shows_each_cells_word_with_its_speedup():
    row = {
        "id": 7, "status": "finished", "wall_s": 930, "blocks": 4, "server_starts": 19, "mean_start_s": 38.0,
        "settled": False, "words": {"draft @ 1": "pays", "ngram @ 1": "inconclusive"},
        "figures": {"draft @ 1": "1.48× [1.05, 2.08]", "ngram @ 1": ""},
    }  # fmt: skip

    assert run_line(row) == (
        "#7 finished: 15.5 min, 4 blocks, 19 server starts, 38 s each; NOT settled: "
        "draft @ 1 pays (1.48× [1.05, 2.08]); ngram @ 1 inconclusive"
    )
