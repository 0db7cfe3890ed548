"""Pipeline simulator: closed forms, PyTorch's op orders, speed, and the memory it feeds."""
import gc
import time
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from calculators.pipeline.simulate import _peaks, closed_form_bubble, inflight_microbatches, simulate
from calculators.pipeline.schedules import SCHEDULE_NAMES, rank_order

schedules = pytest.importorskip("torch.distributed.pipelining.schedules")


def _torch_ops(actions) -> list:
    """PyTorch's _Action list -> our (kind, stage, mb) tuples; overlapped pairs become tuples."""
    out = []
    for a in actions:
        if a is None or a.computation_type.value in ("REDUCE_GRAD",):
            continue
        if a.computation_type.value == "OVERLAP_F_B":
            out.append(tuple((s.computation_type.value, s.stage_index, s.microbatch_index) for s in a.sub_actions))
        else:
            out.append((a.computation_type.value, a.stage_index, a.microbatch_index))
    return out


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 5), (8, 32)])
@pytest.mark.parametrize("name,cls", [("gpipe", "ScheduleGPipe"), ("1f1b", "Schedule1F1B")])
def test_single_stage_orders_match_pytorch(name, cls, p, m):
    order = getattr(schedules, cls)._get_pipeline_order(SimpleNamespace(_num_stages=p, _n_microbatches=m))
    for r in range(p):
        ours, theirs = rank_order(name, p, 1, m, r), _torch_ops(order[r])
        if name == "1f1b" and r == p - 1:
            # PyTorch's 1F1B IR (used for its schedule printouts) numbers the last rank's forwards
            # from 1; its runtime runs 0..m-1. Compare the op kinds there.
            ours, theirs = [op[0] for op in ours], [op[0] for op in theirs]
        assert ours == theirs, (name, p, m, r)


@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (8, 2, 8)])
def test_interleaved_order_matches_pytorch(p, v, m):
    rounds = max(1, m // p)
    ns = SimpleNamespace(n_local_stages=v, pp_group_size=p, microbatches_per_round=m // rounds, _n_microbatches=m)
    for r in range(p):
        torch_ops = _torch_ops(schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(ns, r))
        assert rank_order("interleaved", p, v, m, r) == torch_ops, (p, v, m, r)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 10), (8, 20)])
def test_dualpipe_v_order_matches_pytorch(p, m):
    ns = SimpleNamespace(pp_group_size=p, _n_microbatches=m)
    for r in range(p):
        torch_ops = _torch_ops(schedules.ScheduleDualPipeV._calculate_single_rank_operations(ns, r))
        assert rank_order("dualpipe", p, 1, m, r) == torch_ops, (p, m, r)


@pytest.mark.parametrize("schedule,v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 4)])
@pytest.mark.parametrize("p,m", [(2, 8), (4, 8), (4, 16), (8, 64)])
def test_closed_form_bubble(schedule, v, p, m):
    t = simulate(schedule, p, m, v, f=1.0, b=1.0, w=1.0)
    assert t.bubble_fraction == pytest.approx(closed_form_bubble(schedule, p, v, m))


def test_zero_bubble_schedules_cut_the_bubble_to_a_third():
    # ZB-H1 (Qi et al. 2023): with F = B = W the bubble is (p-1)(F+B-W) = a third of 1F1B's.
    for p, m in [(4, 8), (8, 32), (16, 64)]:
        zb = simulate("zb", p, m, f=1, b=1, w=1).bubble_fraction
        assert zb == pytest.approx((p - 1) / (3 * m)) == pytest.approx(closed_form_bubble("zb", p, 1, m))
        uneven = simulate("zb", p, m, f=1, b=0.8, w=0.6).bubble_fraction    # the general ZB-H1 form
        assert uneven == pytest.approx(closed_form_bubble("zb", p, 1, m, 1, 0.8, 0.6), rel=0.02)
        assert simulate("dualpipe", p, m, f=1, b=1, w=1).bubble_fraction <= zb + 1e-9


def test_inflight_counts():
    assert [inflight_microbatches("1f1b", 4, 1, 8, r) for r in range(4)] == [4, 3, 2, 1]
    assert [inflight_microbatches("1f1b", 4, 1, 2, r) for r in range(4)] == [2, 2, 2, 1]
    assert inflight_microbatches("gpipe", 4, 1, 8, 2) == 8
    # interleaved: rank 0 holds p + (p-1)/v stage-equivalents (Korthikanti et al. 2022, sec. 4.2.3)
    assert inflight_microbatches("interleaved", 4, 2, 8, 0) == pytest.approx(4 + 3 / 2)
    assert inflight_microbatches("interleaved", 8, 4, 32, 0) == pytest.approx(8 + 7 / 4)
    # ZB-H1 keeps every rank at 1F1B's peak (p); DualPipeV holds p + 1/2 (one extra chunk of 2)
    assert [inflight_microbatches("zb", 4, 1, 8, r) for r in range(4)] == [4, 4, 4, 4]
    assert inflight_microbatches("dualpipe", 8, 1, 32, 3) == pytest.approx(8.5)
    assert inflight_microbatches("1f1b", 1, 1, 8, 0) == 1


def test_every_op_respects_its_dependencies():
    t = simulate("interleaved", 4, 8, 2, f=[1, 2, 1, 3, 2, 1, 1, 2], b=1.5, w=0.5, p2p=0.25)
    end = {(k, s, mb): e for rank in t.ops for k, s, mb, _, e in rank}
    for rank in t.ops:
        for (k, s, mb, start, _), nxt in zip(rank, rank[1:]):
            assert nxt[3] >= start                         # a rank runs one op at a time
        for k, s, mb, start, _ in rank:
            if k == "F" and s > 0:
                assert start >= end[("F", s - 1, mb)] + 0.25 - 1e-9
            if k == "B" and s < 7:
                assert start >= end[("B", s + 1, mb)] + 0.25 - 1e-9


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["gpipe", "1f1b", "zb", "dualpipe", "interleaved"]), st.integers(1, 6),
       st.integers(1, 4), st.integers(1, 24), st.floats(0.1, 3), st.floats(0.1, 3), st.floats(0, 2))
def test_every_schedule_finishes_all_work(schedule, p, v, mult, f, b, p2p):
    v = v if schedule == "interleaved" and v > 1 else 2 if schedule == "interleaved" else 1
    m = p * mult if schedule == "interleaved" else max(mult, 2 * p if schedule == "dualpipe" else 1)
    t = simulate(schedule, p, m, v, f=f, b=b, w=b / 2, p2p=p2p)
    chunks = v if schedule == "interleaved" else 2 if schedule == "dualpipe" else 1
    for busy in t.busy:                                    # every rank ran all of its work
        assert busy == pytest.approx(m * chunks * (f + b + b / 2))
    assert t.makespan >= max(t.busy) - 1e-9


def test_simulator_speed():
    # The planner simulates many layouts: p=16, m=256, v=4 (32,768 ops) must take < 50 ms.
    simulate("interleaved", 16, 256, 4)                    # first call builds the op orders
    gc.collect()
    gc.disable()                                           # time the simulator, not a collection
    try:
        best = min(_timed(lambda: simulate("interleaved", 16, 256, 4, f=1, b=1, w=1)) for _ in range(5))
    finally:
        gc.enable()
    assert best < 0.05, f"{best * 1e3:.1f} ms"


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def test_inflight_closed_forms_equal_the_simulated_peaks():
    """inflight_microbatches answers gpipe, 1f1b, zb, dualpipe and interleaved in closed form for speed; the
    simulator's order-derived peaks stay the definition."""
    for p in range(2, 9):
        for m in range(1, 40):
            for schedule in ("gpipe", "1f1b", "zb") + (("dualpipe",) if m >= 2 * p else ()):
                peaks = _peaks(schedule, p, 1, m)
                assert [inflight_microbatches(schedule, p, 1, m, r) for r in range(p)] == list(peaks), (schedule, p, m)
            for v in range(2, 5):                    # interleaved: m a multiple of p (Megatron's rule)
                if m % p == 0:
                    got = [inflight_microbatches("interleaved", p, v, m, r) for r in range(p)]
                    assert got == pytest.approx(_peaks("interleaved", p, v, m)), (p, v, m)


def test_order_arrays_are_rank_order_op_for_op():
    """The simulator's numpy-built orders (GPipe, 1F1B, ZB-H1, interleaved in closed form) are rank_order's."""
    from calculators.pipeline.schedules import KINDS, order_arrays
    for schedule in SCHEDULE_NAMES:
        for p in range(1, 9):
            for m in range(1, 40):
                if schedule == "dualpipe" and m < 2 * p:
                    continue
                for v in ((1, 2, 3) if schedule == "interleaved" else (1,)):
                    for r in range(p):
                        ops = [op for item in rank_order(schedule, p, v, m, r)
                               for op in (item if isinstance(item[0], tuple) else (item,))]
                        kind, stage, mb = order_arrays(schedule, p, v, m, r)
                        got = list(zip(map(KINDS.__getitem__, kind.tolist()), stage.tolist(), mb.tolist()))
                        assert got == [tuple(op) for op in ops], (schedule, p, m, v, r)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(SCHEDULE_NAMES), st.sampled_from([2, 3, 4, 8]), st.sampled_from([2, 3]),
       st.integers(60, 100), st.integers(0, 7), st.sampled_from([0.0, 0.05, 0.3]), st.randoms(use_true_random=False))
def test_long_pipelines_are_extrapolated_exactly(schedule, p, v, rounds, extra, p2p, rng):
    """Past SIM_OPS the makespan is extrapolated from two shorter simulations: on random stage
    costs it is within 0.5% of the full simulation (the steady state settles and repeats)."""
    from calculators.pipeline import simulate as pipeline
    from calculators.pipeline.schedules import n_stages
    v = v if schedule == "interleaved" else 1
    m = p * rounds + (0 if schedule == "interleaved" else extra % p)
    S = n_stages(schedule, p, v)
    f, b, w = ([rng.uniform(0.5, 2.0) for _ in range(S)] for _ in range(3))
    full = simulate(schedule, p, m, v, f=f, b=b, w=w, p2p=p2p, record=False)
    limit, pipeline.SIM_OPS = pipeline.SIM_OPS, S * m - 1      # just too long to simulate op by op
    try:
        long, how = pipeline.simulate_long(schedule, p, m, v, f, b, w, p2p)
    finally:
        pipeline.SIM_OPS = limit
    assert how == "extrapolated"
    assert long.makespan == pytest.approx(full.makespan, rel=5e-3)
    assert long.busy == pytest.approx(full.busy, rel=1e-12)


def test_a_huge_batch_costs_no_more_time_than_a_small_one():
    """16 million sequences on a 16-stage pipeline: timed in milliseconds, its bubble vanishing."""
    from calculators.scenario import evaluate
    t0 = time.perf_counter()
    step = evaluate({"model": {"preset": "llama3-8b"}, "hardware": {"nodes": 128},
                     "parallel": {"dp": 64, "pp": 16, "gbs": 2**24, "schedule": "1f1b"}})["step"]
    assert time.perf_counter() - t0 < 1.0
    assert step["pipeline"] == "extrapolated" and 0 <= step["bubble_fraction"] < 1e-3
