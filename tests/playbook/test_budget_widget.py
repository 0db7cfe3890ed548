"""The budget widget's chart and text read right at the edges: a short run on a few GPUs (cost
flat to 0.1%), scaling that still pays at the largest size, GPU-hours in the thousands."""
import pytest

from calculators.specs.errors import ConfigError
from playbook.widgets import budget


def _values(**kw) -> dict:
    v = {key: default for key, (_, default) in budget.CONTROLS.items()}
    v.update(kw)
    return v


def test_a_flat_cost_is_drawn_on_a_linear_axis_and_no_knee_is_claimed():
    fig, text = budget.compute(_values(tokens=0.1, smallest=8, largest=64, gbs=512))
    layout = fig.layout
    # cost barely moves from 8 to 64 GPUs: a log axis would stretch it over the plot's height
    assert layout["yaxis2"]["type"] == "linear" and "log" not in layout["yaxis2"]["title"]["text"]
    # the days do span a decade: log there
    assert layout["yaxis"]["type"] == "log"
    # no knee in the sizes asked: the chart draws none (it used to mark the largest size as one)
    assert "Scaling still pays at 64 GPUs" in text
    assert not any(str(t.get("name", "")).startswith("knee") for t in fig.data)
    # GPU-hours under a million are written out, not as 0.00266M
    assert "0.0" not in text.split("GPU-hours")[0] and "M GPU-hours" not in text.split("\n")[0]


def test_hours_read_as_a_reader_takes_them():
    assert budget.hours(2.66e6) == "2.66M" and budget.hours(26_600) == "26,600" and budget.hours(26.6) == "26.6"


def test_precision_and_framework_reach_the_planner_and_fp8_needs_fp8_tensor_cores():
    v = _values()
    assert budget.request(v)["constraints"] == {"framework": "megatron", "precision": ["bf16"]}
    assert budget.request({**v, "precision": "fp8", "framework": "fsdp2"})["constraints"] == \
        {"framework": "fsdp2", "precision": ["fp8"]}
    with pytest.raises(ConfigError, match="A100-80GB has no FP8 tensor cores: set precision to bf16"):
        budget.request({**v, "precision": "fp8", "gpu": "A100-80GB"})
    small = {**v, "tokens": 0.1, "smallest": 8, "largest": 16}
    _, bf16 = budget.compute(small)
    _, fp8 = budget.compute({**small, "precision": "fp8"})
    assert "bf16 GEMMs, as megatron runs it" in bf16 and "fp8 GEMMs" in fp8 and bf16 != fp8
    fig, _ = budget.compute({**small, "precision": "fp8", "framework": "fsdp2"})
    assert fig["layout"]["title"]["text"].endswith("H100-80GB, fp8, fsdp2")      # two charts tell themselves apart


def test_an_nvl72_gpu_is_planned_in_whole_racks_and_a_range_without_one_says_so():
    """GB200 and GB300 come in 72-GPU NVL72 racks: the widget asks for 1, 2, 4, ... racks in its
    range (powers of two GPUs, which no whole number of racks makes, once failed at every size)."""
    v = _values(gpu="GB200", smallest=512, largest=8192)
    assert budget.request(v)["gpus"] == [576, 1152, 2304, 4608]
    assert budget.request(_values(smallest=512, largest=8192))["gpus"] == [512, 1024, 2048, 4096, 8192]
    with pytest.raises(ConfigError, match="GB300 comes in nodes of 72 GPUs.*smallest cluster.*include 72 GPUs"):
        budget.request(_values(gpu="GB300", smallest=8, largest=16))
    fig, text = budget.compute(_values(gpu="GB200", model="llama3-8b", tokens=0.1, smallest=64, largest=256))
    assert "fastest on **144 GPUs" in text or "fastest on **72 GPUs" in text
    assert "whole number" not in text
