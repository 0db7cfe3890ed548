"""The collectives chart puts published multi-node nccl-tests runs beside the model's curve only
where they ran on the preset's network, and states the model's shortfall as computed."""
import statistics

from playbook.widgets import network


def test_published_runs_are_drawn_where_their_network_is_the_presets():
    fig, text = network.coll_compute({"op": "all_reduce", "gpu": "H100-80GB", "n": 32, "k": 8})
    stars = [t for t in fig["data"] if t.get("name") == "published nccl-tests runs"]
    assert len(stars) == 1 and len(stars[0]["x"]) == 2 and min(stars[0]["y"]) > 300    # 4 nodes: 324, 366 GB/s
    rows = network.published()
    assert f"is {-statistics.median(r.error for r in rows):.0%} below" in text and "the stars" in text
    # the one A100 run had 6.25 GB/s of EFA per GPU, a quarter of the preset's NICs: no star on its curve
    fig, text = network.coll_compute({"op": "all_reduce", "gpu": "A100-80GB", "n": 16, "k": 8})
    assert not any(t.get("name") == "published nccl-tests runs" for t in fig["data"]) and "the stars" not in text
    # one node: no network, no sentence about it
    _, text = network.coll_compute({"op": "all_reduce", "gpu": "H100-80GB", "n": 8, "k": 8})
    assert "published" not in text
