"""The scenario controls most widgets share: one Gradio control and its default per setting (model,
cluster, layout, the frameworks' knobs), which chapters pick with `show=` and the URL state reads.
Built by playbook.widgets.scenario_controls."""
from __future__ import annotations

import gradio as gr

from calculators.specs import limits
from calculators.specs.hardware import GPU_PRESETS
from calculators.specs.parallel import ATTENTION_KERNELS, DISPATCHERS, FRAMEWORKS, SCHEDULES
from calculators.specs.presets import MODEL_PRESETS
from calculators.specs.recompute import levels as recompute_levels
from playbook.values import MAX_CONFIG_CHARS, MAX_LIST_CHARS


def _slider(lo, hi, label, step=1):
    return lambda v: gr.Slider(lo, hi, v, step=step, label=label)


ATTENTION_LABELS = {"": "framework's (cuDNN: Megatron, torchtitan on Blackwell; else FA2)",
                    "fa2": "FlashAttention-2", "fa3": "FlashAttention-3 (Hopper)", "cudnn": "cuDNN",
                    "cudnn-2025": "cuDNN 9.9 to 9.13 (2025; slower on Blackwell)"}


# name, component factory, default. Factories take the value.
SCENARIO = {
    "model": (lambda v: gr.Dropdown(list(MODEL_PRESETS), value=v, label="model preset"), "llama3-8b"),
    "config": (lambda v: gr.Textbox(v, label="or paste a config.json (not saved in the link)", lines=2,
                                    max_length=MAX_CONFIG_CHARS), ""),
    "gpu": (lambda v: gr.Dropdown(list(GPU_PRESETS), value=v, label="GPU"), "H100-80GB"),
    "nodes": (lambda v: gr.Number(v, label="nodes", precision=0, minimum=1, maximum=limits.CLUSTER["nodes"][1]), 1),
    "gpn": (lambda v: gr.Number(v, label="GPUs per node", precision=0, minimum=1, maximum=1024), 8),
    "dp": (_slider(1, 1024, "dp (data parallel)"), 8),
    "tp": (_slider(1, 64, "tp (tensor parallel)"), 1),
    "pp": (_slider(1, 64, "pp (pipeline stages)"), 1),
    "cp": (_slider(1, 32, "cp (context parallel)"), 1),
    "ep": (_slider(1, 256, "ep (expert parallel)"), 1),
    "etp": (_slider(0, 64, "etp (experts' tensor parallel; 0: as tp)"), 0),
    "vpp": (_slider(1, 8, "vpp (virtual stages)"), 1),
    "split": (lambda v: gr.Textbox(v, label="layers per pipeline stage (18/21/21/20, a run as value x count: "
                                          "1/2x62/1; empty: even)",
                                   max_length=MAX_LIST_CHARS), ""),
    "offload_layers": (_slider(0, 128, "layers whose activations wait in host memory (Megatron; deepspeed: every "
                                      "layer, its cpu_checkpointing)"), 0),
    "offload_modules": (lambda v: gr.Dropdown([("none", ""),
                                               ("experts' inputs (expert_fc1+moe_act)", "expert_fc1+moe_act"),
                                               ("attention core (core_attn+attn_proj)", "core_attn+attn_proj"),
                                               ("both", "core_attn+attn_proj+expert_fc1+moe_act")], value=v,
                                              label="modules whose saved tensors wait in host memory (Megatron)"), ""),
    "optimizer_offload": (_slider(0.0, 1.0, "share of the optimizer kept and stepped in host memory (offload)", 0.1),
                          0.0),
    "param_offload": (lambda v: gr.Checkbox(v, label="ZeRO-3 weight shards in host memory (deepspeed, fsdp2)"), False),
    "tiled_mlp": (lambda v: gr.Checkbox(v, label="MLP in sequence tiles, its forward again in backward (deepspeed's "
                                                 "TiledMLP, ALST)"), False),
    "host_optimizer_gbps": (lambda v: gr.Number(v, label="host memory GB/s a node for the offloaded optimizer's step "
                                                         "(0: 32)", minimum=0, maximum=limits.CLUSTER[
                                                             "host_optimizer_gbps"][1]), 0.0),
    "zero": (lambda v: gr.Radio([0, 1, 2, 3], value=v, label="ZeRO stage"), 1),
    "dp_replicate": (_slider(1, 128, "HSDP replicas (fsdp2, ZeRO 2/3; 1: FSDP over every rank)"), 1),
    "sp": (lambda v: gr.Checkbox(v, label="sequence parallel"), True),
    "tp_overlap": (lambda v: gr.Checkbox(v, label="TP comm overlapped with GEMMs (Megatron/TE)"), False),
    "ep_overlap": (lambda v: gr.Checkbox(v, label="EP all-to-all under another micro-batch (Megatron)"), False),
    "mbs": (_slider(1, 32, "micro-batch (sequences)"), 1),
    "gbs": (lambda v: gr.Number(v, label="global batch (sequences)", precision=0, minimum=1, maximum=limits.MAX_BATCH),
            64),
    "seq": (_slider(512, 131072, "sequence length", 512), 4096),
    "recompute": (lambda v: recompute_radio(v, moe=False), "none"),
    "recompute_ranks": (lambda v: gr.Textbox(v, label="recompute per pipeline rank, first to last (fullx2/none: "
                                                     "a run as value x count; empty: same on all)",
                                             max_length=MAX_LIST_CHARS), ""),
    "schedule": (lambda v: gr.Dropdown(list(SCHEDULES), value=v, label="pipeline schedule"), "1f1b"),
    "precision": (lambda v: gr.Radio(["bf16", "fp8"], value=v, label="precision"), "bf16"),
    "framework": (lambda v: gr.Dropdown(list(FRAMEWORKS), value=v, label="framework memory layout"), "megatron"),
    "dispatcher": (lambda v: gr.Radio(list(DISPATCHERS), value=v,
                                      label="MoE dispatcher (deepep, hybridep: a copy per node)"), "alltoall"),
    "dispatch_sms": (_slider(0, 148, "SMs for DeepEP's or HybridEP's kernels (0: their default; DeepEP takes an "
                                     "even count)",
                             step=2), 0),
    "attention": (lambda v: gr.Dropdown([(ATTENTION_LABELS.get(k, k), k) for k in ATTENTION_KERNELS], value=v,
                                        label="attention kernel"), ""),
    "experts": (lambda v: gr.Radio([("framework's", ""), ("loop (one launch per expert)", "loop"),
                                    ("fused (one kernel)", "fused")], value=v, label="local experts' GEMMs"), ""),
    "grad_dtype": (lambda v: gr.Radio([("framework's", ""), ("fp32", "fp32"), ("bf16", "bf16")], value=v,
                                      label="gradients kept and reduced in"), ""),
    "loss": (lambda v: gr.Radio([("framework's", ""), ("eager, fp32 upcast", "eager"), ("compiled", "compiled"),
                                 ("eager on bf16 logits", "bf16"), ("chunked (Liger's fused linear)", "chunked")],
                                value=v, label="cross-entropy"), ""),
    "elementwise": (lambda v: gr.Radio([("framework's", ""), ("eager (PyTorch ops)", "eager"),
                                        ("fused (TE's, Liger's, compiled)", "fused")], value=v,
                                       label="norms, RoPE and activation kernels (deepspeed fused: Liger's)"), ""),
    "optimizer": (lambda v: gr.Radio([("AdamW", "adamw"), ("Muon (AdamW on embeddings and norms)", "muon")], value=v,
                                     label="optimizer"), "adamw"),
    "moment_dtype": (lambda v: gr.Radio([("fp32", ""), ("bf16 (precision-aware optimizer)", "bf16")], value=v,
                                        label="Adam moments in"), ""),
    "master_dtype": (lambda v: gr.Radio([("framework's", ""), ("fp32", "fp32"), ("16-bit remainders", "remainder"),
                                         ("16-bit", "16bit"),
                                         ("none (bf16 weights)", "none")], value=v, label="master weights"), ""),
    "fp8_recipe": (lambda v: gr.Radio([("framework's (Megatron: delayed; fsdp2: tensorwise)", ""),
                                       ("delayed (Megatron)", "delayed"), ("tensorwise (current)", "tensorwise"),
                                       ("MXFP8 (Blackwell)", "mxfp8"), ("blockwise (Megatron)", "blockwise"),
                                       ("rowwise (fsdp2)", "rowwise"),
                                       ("rowwise, bf16 weight gradient (fsdp2)", "rowwise_with_gw_hp")], value=v,
                                      label="FP8 recipe (Megatron: Transformer Engine's; fsdp2: torchao's)"), ""),
    "fp8_weights": (lambda v: gr.Radio([("framework's", ""), ("FP8 parameters", "fp8"),
                                        ("bf16 + cached FP8 copy", "bf16")], value=v, label="FP8 layers' weights"), ""),
}


def recompute_radio(value, moe: bool):
    """none, selective and full; for a widget whose model is an MoE preset (chapter 7) or that shows
    ep (the appendix's) also Megatron's MoE module lists between selective and full, what the
    planner tries too (a dense model has no MoE module to recompute)."""
    return gr.Radio(list(recompute_levels("megatron", moe)), value=value, label="activation recompute")
