"""The planner's one-sentence reason: the seconds it names add up to the difference between the
two steps, so a reader can check it (it had named two gains of 3.4 and 3.2 s as outweighing a
10.8 s loss, leaving out the 4.5 s of other gains that made the difference)."""
import re
from types import SimpleNamespace

import pytest

from calculators.planning.explain import why
from calculators.specs.parallel import ParallelConfig


def plan(breakdown: dict, **par):
    step = SimpleNamespace(time_s=sum(breakdown.values()), breakdown=breakdown)
    layout = ParallelConfig(**par)
    return SimpleNamespace(step=step, par=layout, label=lambda: f"layout {par}")


@pytest.mark.parametrize("loser", [
    {"compute": 60.0, "tp_exposed": 6.0, "bubble": 4.0, "other": 3.0, "optimizer": 2.0, "recompute": 1.0},
    {"compute": 52.0, "tp_exposed": 3.0, "bubble": 1.0, "recompute": 20.0},
    {"compute": 40.0, "recompute": 30.0},
])
def test_the_reason_names_gains_that_outweigh_the_losses_and_sums_the_rest(loser):
    winner = {"compute": 50.0, "tp_exposed": 1.0, "recompute": 12.0, "bubble": 1.0, "other": 2.0,
              "optimizer": 1.5}
    text = why(plan(winner, dp=2), plan(loser, tp=2))
    shorter = sum(float(x) for x in re.findall(r"([\d.]+) s shorter", text))
    more = sum(float(x) for x in re.findall(r"([\d.]+) s more", text))
    gap = sum(loser.values()) - sum(winner.values())
    assert gap > 0 and shorter - more == pytest.approx(gap, rel=0.01), text
    assert shorter > more, text


def test_gains_too_small_to_name_are_still_summed():
    """Five parts 0.05 s shorter each, none worth naming at a 100 s step, still count: 1 - 0.5 s was
    printed for a 0.75 s difference."""
    winner = {"compute": 90.0, "tp_exposed": 1.0, "bubble": 1.0, "other": 1.0, "optimizer": 1.0, "recompute": 6.5}
    loser = {"compute": 91.0, "tp_exposed": 1.05, "bubble": 1.05, "other": 1.05, "optimizer": 1.05, "recompute": 6.0}
    text = why(plan(winner, dp=2), plan(loser, tp=2))
    shorter = sum(float(x) for x in re.findall(r"([\d.]+) s shorter", text))
    more = sum(float(x) for x in re.findall(r"([\d.]+) s more", text))
    assert shorter - more == pytest.approx(sum(loser.values()) - sum(winner.values()), rel=0.01), text
