"""DeepEP's intranode kernels on Blackwell: costed at their measured, SM-bound rate (dispatch.py),
checked on measurements the table was not read from."""
from dataclasses import replace

import pytest

from calculators.planning.planner import plan
from calculators.specs.hardware import ClusterSpec, gpu_from_name
from calculators.specs.parallel import ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.time.comm import Group, dispatch_time, experts_hit
from calculators.time.dispatch import DEEPEP_B200, QWEN3_B200, deepep_rates, size_factor
from calculators.time.layercomm import ep_exchange
from calculators.time.profiles import default_profile

B200 = gpu_from_name("B200")


def test_rates_follow_the_b200_table_and_hold_on_the_gb200_one():
    """The table's own points come back; DeepEP's GB200 table in the same document (8 ranks, 16 to
    32 SMs, not read by the calculators) agrees within 5%; torchtitan's 128-SM Qwen3 rates, from
    which the token size's cost was solved (one number for dispatch and combine), within 2%."""
    for sms, d, c in DEEPEP_B200:
        assert deepep_rates(sms, 7168 * 2) == pytest.approx((d, c))
    for sms, d, c in ((16, 362.01, 310.21), (24, 512.72, 425.95), (32, 615.78, 519.57)):
        got = deepep_rates(sms, 7168 * 2)
        assert got[0] == pytest.approx(d, rel=0.05) and got[1] == pytest.approx(c, rel=0.05)
    got = deepep_rates(128, QWEN3_B200[0])
    assert got[0] == pytest.approx(QWEN3_B200[1], rel=0.02) and got[1] == pytest.approx(QWEN3_B200[2], rel=0.02)
    # more SMs help up to about 36, then the rate levels off (48 SMs' beyond); a smaller token moves
    # fewer bytes a second
    combine = [deepep_rates(s, 4096)[1] for s in range(1, 200)]
    assert combine == sorted(combine) and combine[0] > 0 and combine[47:] == [combine[47]] * len(combine[47:])
    assert deepep_rates(16, 4096)[0] < deepep_rates(24, 4096)[0] < deepep_rates(32, 4096)[0]
    assert size_factor(4096) < size_factor(8192) < size_factor(14336) == pytest.approx(1.0)


def test_dispatch_time_uses_the_measured_rate_only_where_it_was_measured():
    """On 8 B200 DeepEP's kernels take the measured time for the bytes a rank receives (its own
    tokens too); HybridEP, H100 and DeepEP across nodes keep the link model."""
    one, prof = ClusterSpec(B200, nodes=1, gpus_per_node=8), default_profile("B200")
    g, nbytes = Group(8, 8, 1), 2**27
    hit = experts_hit(128, 8, 8)
    d, c = deepep_rates(20, 4096)
    deep = dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=4096, dispatcher="deepep")
    assert deep == pytest.approx(7 * prof.latency_us["intra"] * 1e-6 + nbytes * hit * (1 / d + 1 / c) / 2 / 1e9)
    link = dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=4096, dispatcher="hybridep")
    assert link == dispatch_time(nbytes, 128, 8, g, one, prof) < 0.6 * deep
    assert dispatch_time(nbytes, 128, 8, g, one, prof, token_bytes=4096, dispatcher="deepep", sms=128) < 0.8 * deep
    h100 = ClusterSpec(gpu_from_name("H100-80GB"), nodes=1, gpus_per_node=8)
    assert dispatch_time(nbytes, 128, 8, g, h100, default_profile("H100-80GB"), token_bytes=4096,
                         dispatcher="deepep") == dispatch_time(nbytes, 128, 8, g, h100, default_profile("H100-80GB"))
    two = ClusterSpec(B200, nodes=2, gpus_per_node=8)
    assert dispatch_time(nbytes, 128, 8, Group(16, 8, 2), two, prof, token_bytes=4096, dispatcher="deepep") == \
        dispatch_time(nbytes, 128, 8, Group(16, 8, 2), two, prof)


def test_the_planner_takes_the_faster_dispatcher_of_those_allowed():
    """On 8 B200 DeepEP's kernels at their default 20 SMs (about 360 GB/s for Mixtral's 8 KB tokens,
    320 for Qwen3's 4 KB) take longer than NCCL's all-to-all over NVLink 5 for Mixtral's top-2 (a
    token reaches two GPUs either way) and, narrowly, for Qwen3-30B-A3B's top-8 (5.3 GPUs against 7
    copies); on 128 SMs, as torchtitan's DeepEP branch runs them, DeepEP wins for Qwen3. Allowed
    both, the planner keeps the all-to-all for Mixtral."""
    cluster = ClusterSpec(B200, nodes=1, gpus_per_node=8)
    prof = default_profile("B200")
    for name, sms, faster in (("mixtral-8x7b", 0, "alltoall"), ("qwen3-30b-a3b", 0, "alltoall"),
                              ("qwen3-30b-a3b", 128, "deepep")):
        model = model_from_name(name)
        par = ParallelConfig(dp=8, ep=8, mbs=1, gbs=64, seq=4096, zero=1, dispatch_sms=sms)
        times = {d: ep_exchange(model, replace(par, dispatcher=d), cluster, prof) for d in ("alltoall", "deepep")}
        assert min(times, key=times.get) == faster
    best = plan(model_from_name("mixtral-8x7b"), cluster, 4096, 64,
                {"ep": 8, "tp": 1, "pp": 1, "dispatcher": ["alltoall", "deepep"]}).plans[0]
    assert best.par.dispatcher == "alltoall"


def test_dispatch_sms_is_checked_and_named():
    from calculators.specs.errors import ConfigError
    from calculators.specs.parallel import check_layout
    for bad in (-1, 1025, 2.5, "20", True):
        with pytest.raises(ConfigError, match="dispatch_sms"):
            ParallelConfig(dispatch_sms=bad)
    cluster, model = ClusterSpec(B200, nodes=1, gpus_per_node=8), model_from_name("qwen3-30b-a3b")
    warns = check_layout(model, cluster, ParallelConfig(dp=8, ep=8, gbs=8, dispatch_sms=64))
    assert any("dispatch_sms=64" in w and "all-to-all" in w for w in warns)
    assert not check_layout(model, cluster, ParallelConfig(dp=8, ep=8, gbs=8, dispatch_sms=64, dispatcher="deepep"))
