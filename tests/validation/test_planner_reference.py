"""The planner on the nanotron runs (validation/planner.py). The issue's targets: the measured best
in the top 5 in most cells (today 17 of 33), and the top plan at >= 90% of the best measured (today
89.7% over the 20 cells where it was measured; not met). Two cells pull the mean down: a 64-node
cell, whose measurements vary up to six times between jobs, and an 8-node cell where the top
plan's ZeRO-0 run measured half its ZeRO-1 twin. These bounds guard today's level."""
import statistics

from validation.planner import check


def test_planner_on_the_nanotron_cells_does_not_regress():
    c = check()
    assert c.cells >= 30
    assert c.in_top > c.cells / 2
    assert statistics.mean(c.ratios) >= 0.88
