"""The recommendation per level and its derived schedule, on hand-computed cases."""

from experiments.measurement.deploy import recommendation as rec

CONFIG = {"method": "draft_model", "num_speculative_tokens": 4, "model": "draft"}


def _arm(arm, cells, k=4):
    return rec.ArmCells(arm, f"arm {arm}", k, cells, CONFIG)


def test_pays_up_to_a_level_gives_the_arm_below_and_a_derived_schedule():
    arm = _arm(1, {1: ("faster", 1.4), 4: ("faster", 1.2), 16: ("not worth it", 1.01), 64: ("slower", 0.8)})
    advice = rec.recommend([arm], [64, 1, 16, 4], max_batch=64)
    assert [(a.level, a.word, a.arm) for a in advice.levels] == [
        (1, "run arm", 1), (4, "run arm", 1), (16, "no speculation", None), (64, "no speculation", None),
    ]  # fmt: skip
    # The change between 4 and 16 parts at isqrt(4 * 16) = 8.
    assert advice.derived is not None
    assert advice.derived.schedule == [(1, 8, 4), (9, 64, 0)]
    assert advice.derived.config == {**CONFIG, "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 64, 0]]}


def test_the_faster_arm_with_the_larger_speedup_is_named():
    one = _arm(1, {1: ("faster", 1.3), 8: ("faster", 1.1)})
    two = _arm(2, {1: ("faster", 1.5), 8: ("slower", 0.9)})
    advice = rec.recommend([one, two], [1, 8], max_batch=8)
    assert [(a.word, a.arm, a.speedup) for a in advice.levels] == [("run arm", 2, 1.5), ("run arm", 1, 1.1)]
    assert advice.derived is None  # two arms recommended: no single schedule


def test_an_open_cell_with_no_arm_faster_is_undecided_and_blocks_the_derived_schedule():
    arm = _arm(1, {1: ("faster", 1.3), 4: ("inconclusive", 1.02), 16: ("slower", 0.7)})
    advice = rec.recommend([arm], [1, 4, 16], max_batch=16)
    assert [a.word for a in advice.levels] == ["run arm", "undecided", "no speculation"]
    assert advice.derived is None


def test_faster_everywhere_or_nowhere_derives_nothing():
    everywhere = rec.recommend([_arm(1, {1: ("faster", 1.3), 4: ("faster", 1.2)})], [1, 4], max_batch=4)
    assert [a.word for a in everywhere.levels] == ["run arm", "run arm"]
    assert everywhere.derived is None
    nowhere = rec.recommend([_arm(1, {1: ("equivalent", 1.0), 4: ("slower", 0.9)})], [1, 4], max_batch=4)
    assert [a.word for a in nowhere.levels] == ["no speculation"] * 2
    assert nowhere.derived is None


def test_a_blocked_cell_is_undecided_not_no_speculation():
    advice = rec.recommend([_arm(1, {1: ("stream distorted", 1.3)})], [1], max_batch=1)
    assert advice.levels[0].word == "undecided"


def test_the_schedule_s_top_band_reaches_max_num_seqs_and_k_is_the_arm_s():
    arm = _arm(1, {2: ("faster", 1.2), 32: ("slower", 0.9)}, k=3)
    advice = rec.recommend([arm], [2, 32], max_batch=256)
    assert advice.derived is not None
    assert advice.derived.schedule == [(1, 8, 3), (9, 256, 0)]
