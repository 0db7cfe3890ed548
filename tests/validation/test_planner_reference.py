"""The planner on the nanotron runs (validation/planner.py). The issue's targets (measured best in
the top 5 in most cells; the top plan at >= 90% of the best measured) are not met yet (README).
These bounds guard today's level: 15 of 33 cells, 83.5% over the 20 cells where the top plan was
measured (one of them a 64-node cell whose measurements vary up to six times between jobs)."""
import statistics

from validation.planner import check


def test_planner_on_the_nanotron_cells_does_not_regress():
    c = check()
    assert c.cells >= 30
    assert c.in_top / c.cells >= 0.4
    assert statistics.mean(c.ratios) >= 0.82
