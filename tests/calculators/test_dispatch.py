"""DeepEP's intranode kernels on Blackwell: costed at their measured, SM-bound rate (dispatch.py),
checked on measurements the table was not read from."""
from dataclasses import replace

import pytest

from calculators.planning.planner import plan
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.time.comm import Group, dispatch_time, experts_hit
from calculators.time.dispatch import deepep_rates, nic_share
from calculators.time.layercomm import ep_exchange
from calculators.time.profiles import default_profile

B200 = gpu_from_name("B200")
# DeepEP on 8 B200 (hybrid-ep branch README at 94a9f8f): SMs, dispatch and combine GB/s at 14 KB tokens
DEEPEP_B200 = ((16, 348.0, 302.0), (24, 494.0, 420.0), (28, 560.0, 477.0), (32, 619.0, 524.0),
               (36, 635.0, 549.0), (40, 629.0, 570.0), (44, 640.0, 577.0), (48, 646.0, 586.0))


def test_rates_hold_on_the_measurements_they_were_not_fitted_on():
    """Fitted on 24 SMs and the level (48 SMs for 14 KB tokens, 128 for 4 KB); the B200 table's other
    SM counts come back within 8%, DeepEP's GB200 table at 8 ranks in the same document within 10%."""
    fitted = {24, 48}
    for sms, d, c in DEEPEP_B200:
        got = deepep_rates(sms, 7168 * 2)
        assert got[0] == pytest.approx(d, rel=0.08) and got[1] == pytest.approx(c, rel=0.08)
        if sms in fitted:
            assert got == pytest.approx((d, c))
    for sms, d, c in ((16, 362.01, 310.21), (24, 512.72, 425.95), (32, 615.78, 519.57)):
        got = deepep_rates(sms, 7168 * 2)
        assert got[0] == pytest.approx(d, rel=0.10) and got[1] == pytest.approx(c, rel=0.10)
    # the small tokens' rates the fit read: 128 SMs, and 24 SMs from torchtitan's "41.2% / 48.3% faster"
    assert deepep_rates(128, 4096) == pytest.approx((516.71, 485.75))
    assert deepep_rates(24, 4096) == pytest.approx((516.71 * 0.588, 485.75 * 0.517))
    # more SMs never slow it and it levels off; a smaller token moves fewer bytes a second, more so
    # on few SMs
    for b in (4096, 8192, 14336):
        for column in (0, 1):
            rates = [deepep_rates(s, b)[column] for s in range(1, 200)]
            assert rates == sorted(rates) and rates[0] > 0 and rates[-1] == rates[130]
    small = [deepep_rates(s, 4096)[0] / deepep_rates(s, 14336)[0] for s in (20, 24, 128)]
    assert small[0] == pytest.approx(small[1]) and small[1] < small[2] < 1


def test_dispatch_time_uses_the_measured_rate_only_where_it_was_measured():
    """On 8 B200 DeepEP's kernels take the measured time for the bytes a rank receives (its own
    tokens too), never less than the links allow; HybridEP, H100, DeepEP across 8 nodes, groups of
    more than 8 in an NVL72 domain and an unknown token size keep the link model."""
    one, prof = ClusterSpec(B200, nodes=1, gpus_per_node=8), default_profile("B200")
    g, nbytes = Group(8, 8, 1), 2**27
    hit = experts_hit(128, 8, 8)
    d, c = deepep_rates(20, 4096)
    deep = dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=4096, dispatcher="deepep")
    assert deep == pytest.approx(nbytes * hit * (1 / d + 1 / c) / 2 / 1e9)
    link = dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=4096, dispatcher="hybridep")
    assert link == dispatch_time(nbytes, 128, 8, g, one, prof) < 0.5 * deep
    assert dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=4096, dispatcher="deepep", sms=128) < 0.6 * deep
    assert dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=0, dispatcher="deepep") == link
    slow = ClusterSpec(B200, nodes=1, gpus_per_node=8, intra_node_gbps=50)
    assert dispatch_time(nbytes, 128, 8, g, slow, prof, token_bytes=4096, dispatcher="deepep") == \
        dispatch_time(nbytes, 128, 8, g, slow, prof) > 4 * deep
    h100 = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1, gpus_per_node=8)
    assert dispatch_time(nbytes, 128, 8, g, h100, default_profile("H100-80GB"), token_bytes=4096,
                         dispatcher="deepep") == dispatch_time(nbytes, 128, 8, g, h100, default_profile("H100-80GB"))
    eight = ClusterSpec(B200, nodes=8, gpus_per_node=8)
    assert dispatch_time(nbytes, 128, 8, Group(64, 8, 8), eight, prof, token_bytes=4096, dispatcher="deepep") == \
        dispatch_time(nbytes, 128, 8, Group(64, 8, 8), eight, prof)
    rack = ClusterSpec(gpu_from_name("GB200"), nodes=1, gpus_per_node=16)
    assert dispatch_time(nbytes, 128, 8, Group(16, 16, 1), rack, prof, token_bytes=4096, dispatcher="deepep") == \
        dispatch_time(nbytes, 128, 8, Group(16, 16, 1), rack, prof)


def test_the_planner_takes_the_faster_dispatcher_of_those_allowed():
    """On 8 B200 DeepEP's kernels at their default 20 SMs (about 320 GB/s for Mixtral's 8 KB tokens,
    230 for Qwen3's 4 KB) take longer than NCCL's all-to-all over NVLink 5 for Mixtral's top-2 (a
    token reaches two GPUs either way) and for Qwen3-30B-A3B's top-8 (5.3 GPUs against 7 copies);
    on 128 SMs, as torchtitan's DeepEP branch runs them, DeepEP wins for Qwen3. Allowed both, DeepEP
    listed first, the planner switches to the all-to-all for Mixtral."""
    cluster = ClusterSpec(B200, nodes=1, gpus_per_node=8)
    prof = default_profile("B200")
    for name, sms, faster in (("mixtral-8x7b", 0, "alltoall"), ("qwen3-30b-a3b", 0, "alltoall"),
                              ("qwen3-30b-a3b", 128, "deepep")):
        model = model_from_name(name)
        par = ParallelConfig(dp=8, ep=8, mbs=1, gbs=64, seq=4096, zero=1, dispatch_sms=sms)
        times = {d: ep_exchange(model, replace(par, dispatcher=d), cluster, prof) for d in ("alltoall", "deepep")}
        assert min(times, key=times.get) == faster
    best = plan(model_from_name("mixtral-8x7b"), cluster, 4096, 64,
                {"ep": 8, "tp": 1, "pp": 1, "dispatcher": ["deepep", "alltoall"]}).plans[0]
    assert best.par.dispatcher == "alltoall"


def test_dispatch_sms_is_checked_and_named():
    from calculators.specs.errors import ConfigError
    from calculators.specs.parallel import check_layout
    for bad in (-1, 1025, 2.5, "20", True):
        with pytest.raises(ConfigError, match="dispatch_sms"):
            ParallelConfig(dispatch_sms=bad)
    with pytest.raises(ConfigError, match="dispatch_sms=3 must be even"):
        ParallelConfig(dispatcher="deepep", dispatch_sms=3)
    cluster, model = ClusterSpec(B200, nodes=1, gpus_per_node=8), model_from_name("qwen3-30b-a3b")
    warns = check_layout(model, cluster, ParallelConfig(dp=8, ep=8, gbs=8, dispatch_sms=64))
    assert any("dispatch_sms=64" in w and "all-to-all" in w for w in warns)
    assert not check_layout(model, cluster, ParallelConfig(dp=8, ep=8, gbs=8, dispatch_sms=64, dispatcher="deepep"))


def test_two_nodes_use_half_the_nic_for_deepep():
    """DeepEP's RDMA GB/s counts the copies a rank keeps in its own node: its README's 43 GB/s over 2
    nodes is 21.5 GB/s on the NIC, half the share its 4- and 8-node figures give; H200 runs of the
    same kernels over 2 nodes (DeepEP issue 493: 40.89 dispatching, 44.37 combining), not read by
    the calculators, agree within 5%. The share rises smoothly with the nodes, so a dispatch never
    takes longer over fewer nodes."""
    assert nic_share("deepep", 2) == pytest.approx(0.50, abs=0.01) and nic_share("deepep", 8) == 1.0
    assert nic_share("hybridep", 2) == pytest.approx(0.84, abs=0.01) and nic_share("alltoall", 2) == 1.0
    h200 = (2 / (1 / 40.89 + 1 / 44.37)) / 2 / 50 / 0.865
    assert h200 == pytest.approx(nic_share("deepep", 2), rel=0.05)
    h100, prof = gpu_from_name("H100-80GB"), default_profile("H100-80GB")
    for dispatcher in ("deepep", "hybridep"):
        # (group-limited routing only where the groups divide among the nodes: experts_hit)
        for groups, counts in (((0, 0), (1, 2, 3, 4, 6, 8, 16)), ((8, 4), (1, 2, 4, 8, 16))):
            times = [dispatch_time(2**27, 256, 8, Group(8 * n, 8, n), ClusterSpec(h100, nodes=n, gpus_per_node=8),
                                   prof, groups, dispatcher=dispatcher) for n in counts]
            assert times == sorted(times), (dispatcher, groups, times)
    # over 2 nodes the NICs, not NVLink, bound it: twice the NIC time DeepEP took before
    two = ClusterSpec(h100, nodes=2, gpus_per_node=8)
    alpha = (prof.latency_us["inter"] + 7 * prof.latency_us["intra"]) * 1e-6
    base = dispatch_time(2**28, 128, 8, Group(16, 8, 2), two, prof) - alpha
    deep = dispatch_time(2**28, 128, 8, Group(16, 8, 2), two, prof, dispatcher="deepep") - alpha
    assert deep == pytest.approx(2 * base, rel=0.02)


def test_the_planner_ranks_dispatchers_by_the_step():
    """Qwen3-30B-A3B on 32 H100 under DualPipe (PP 4, EP 8): DeepEP's exchange takes half the all-
    to-all's, but its SMs leave less compute to hide the exchange behind and the step comes out
    longer; the planner, offered DeepEP first, keeps the shorter step."""
    from calculators.time.step import estimate_step
    cluster, prof = ClusterSpec(gpu_from_name("H100-80GB"), nodes=4, gpus_per_node=8), default_profile("H100-80GB")
    model = model_from_name("qwen3-30b-a3b")
    best = plan(model, cluster, 4096, 128, {"pp": 4, "ep": 8, "tp": 1, "mbs": 1, "schedule": "dualpipe",
                                            "recompute": "selective", "dispatcher": ["deepep", "alltoall"]}).plans[0]
    steps = {d: estimate_step(model, cluster, replace(best.par, dispatcher=d), prof).time_s
             for d in ("deepep", "alltoall")}
    exchange = {d: ep_exchange(model, replace(best.par, dispatcher=d), cluster, prof) for d in ("deepep", "alltoall")}
    assert best.par.dispatcher == min(steps, key=steps.get) == "alltoall"
    assert min(exchange, key=exchange.get) == "deepep"          # the exchange alone would pick the other
