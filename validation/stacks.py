"""Predicted vs published on stacks the time model was not developed on: PyTorch-native FSDP
(torchtitan, PyTorch's FSDP runs), NVIDIA's benchmark suites beyond published_runs.csv, long
context, mixture of experts, FP8; tokens/s/GPU and peak memory. One knob is fitted to twelve of
them, Megatron's per-expert host time in FP8 (calculators/time/host.py, on its Qwen3-30B-A3B runs;
the other MoE runs check it); nothing else is.

    python -m validation.stacks

Each row of validation/data/published_more.csv is one published run, with where it was read
(validation/data/published_more_SOURCES.md says what each source is and how it was read). A row
the calculators cannot express is listed with the reason, never dropped silently. Errors are
tabled per cell of (framework, dense or MoE, precision, sequence length, ZeRO stage, pipeline or
not), beside two constant-MFU guesses (40% and 50% of the dense bf16 peak on the same FLOPs), which
a model worth its complexity must beat.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from calculators.specs.errors import ConfigError
from calculators.time.flops import model_flops_per_token
from calculators.specs.hardware import BLACKWELL, GPU_PRESETS, ClusterSpec
from calculators.specs.kernels import layout_attention
from calculators.memory.estimate import estimate_memory
from calculators.specs.models import ModelSpec, MoESpec
from calculators.specs.parallel import ParallelConfig, check_layout
from calculators.specs.recompute import SAC_WITH_ATTENTION, modules
from validation import recipes
from validation.conventions import tokens_from_tflops
from validation.gpus import PEAK_BOUND, VALIDATION_GPUS, at_peak
from calculators.specs.presets import MODEL_PRESETS, model_from_name
from calculators.time.profiles import default_profile
from calculators.time.step import estimate_step

DATA = Path(__file__).parent / "data" / "published_more.csv"
FRAMEWORKS = {"torchtitan": "fsdp2", "fsdp2": "fsdp2", "fsdp": "fsdp2", "megatron": "megatron", "nemo": "megatron",
              "deepspeed": "deepspeed", "nanotron": "nanotron"}
RECOMPUTE = {"": "none", "none": "none", "no": "none", "false": "none", "full": "full", "selective": "selective",
             "op": "op_sac", "op-sac": "op_sac", "op_sac": "op_sac", "selective op": "op_sac", "core_attn": "core_attn",
             # torchtitan's "selective layer" checkpoints every N-th block; its default selective_ac_option is "2"
             "selective layer": "layer:2"}


def _recompute(text: str) -> str:
    """The calculators' policy for a row's recompute text: a policy name, or one with its source's
    words in brackets ("full (every block)", "selective (torchtitan op; config default)", "selective
    (per-op SAC)"), or Megatron's recompute_modules list ("selective (layernorm, moe)": the modules
    joined by "+"). A policy the calculators do not model (fms-fsdp's fraction of blocks, a module
    this project does not model) is refused, naming it."""
    t = text.strip().lower()
    base, _, detail = t.partition(" (")
    words = detail.replace(";", " ").replace(":", " ").replace(")", " ").split()
    if base != "selective" or not detail:
        return RECOMPUTE.get(base, base)
    if SAC_WITH_ATTENTION in words:               # op SAC whose save list lacks the attention kernel
        return SAC_WITH_ATTENTION
    if "op" in words or "per-op" in words:
        return "op_sac"
    if "torchtitan" in words and "layer" in words:
        return RECOMPUTE["selective layer"]
    listed = "+".join(w.strip(",") for w in words)
    if modules(listed):
        return listed
    raise ValueError(f"recompute {text.strip()[:80]!r} is a policy the calculators do not model")


@dataclass(frozen=True)
class Run:
    line: int
    source: str
    model: ModelSpec
    cluster: ClusterSpec
    par: ParallelConfig
    measured: float | None            # tokens/s/GPU
    memory_gib: float | None
    memory_kind: str
    note: str


def _int(row, key, default=None):
    text = (row.get(key) or "").strip()
    return int(float(text)) if text else default


def _model(row) -> ModelSpec:
    """The row's model: a preset by name, with the fields its model_shape gives replacing the
    preset's (a benchmark's proxy config keeps 7 of Llama 3 405B's 126 layers and GPT-2's
    vocabulary); else the shape alone. mlp=gelu is a two-matrix MLP (GPT's GELU, Nemotron-4's
    squared ReLU), swiglu the gated three-matrix one."""
    name = row["model"].strip().lower()
    fields = dict(part.split("=", 1) for part in row["model_shape"].replace(" ", "").split(";") if "=" in part)
    ints = {k: int(v) for k, v in fields.items() if k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")}
    words = {k: fields[k] for k in ("mlp", "norm") if k in fields}
    if "tied" in fields:                       # tied=1: the output layer is the embedding's matrix
        words["tied_embeddings"] = fields["tied"] in ("1", "true", "yes")
    moe = MoESpec(experts=int(fields["experts"]), top_k=int(fields["top_k"]), expert_ffn=int(fields["expert_ffn"]),
                  shared_experts=int(fields.get("shared", 0))) if "experts" in fields else None
    if name in MODEL_PRESETS:
        base = model_from_name(name)
        return replace(base, **ints, **words, **({"moe": moe} if moe else {})) if ints or words or moe else base
    return ModelSpec(layers=ints["layers"], hidden=ints["hidden"], heads=ints["heads"],
                     kv_heads=ints.get("kv_heads", 0), ffn=ints.get("ffn", 0), vocab=ints["vocab"], moe=moe,
                     name=name[:100], **words)


def _run(line: int, row: dict) -> Run:
    framework = FRAMEWORKS.get(row["framework"].strip().lower())
    if framework is None:
        raise ValueError(f"framework {row['framework']!r} is not one the calculators model")
    gpu_name = row["gpu"].strip()
    gpu = GPU_PRESETS.get(gpu_name) or VALIDATION_GPUS.get(gpu_name)
    if gpu is None:
        raise ValueError(f"gpu {gpu_name!r} is not a preset")
    model = _model(row)
    gpus, per_node = _int(row, "gpus"), _int(row, "gpus_per_node", gpu.gpus_per_node)
    if not gpus:
        raise ValueError("the number of GPUs is not stated")
    tp, pp, cp, ep = (_int(row, k, 1) for k in ("tp", "pp", "cp", "ep"))
    vpp = _int(row, "vpp", 1)
    dp = _int(row, "dp", gpus // (tp * pp * cp))
    mbs, seq = _int(row, "mbs", 1), _int(row, "seq")
    gbs = _int(row, "gbs", dp * mbs)
    recompute = _recompute(row["recompute"])
    zero = _int(row, "zero", 3 if framework == "fsdp2" else 1)
    if row["framework"].strip().lower() == "torchtitan" and pp > 1 and zero == 3:
        # torchtitan's FSDP under a pipeline keeps a micro-batch's gathered weights from its forward
        # to its backward (reshard_after_forward False, "to avoid per-microbatch all-gathers": its
        # parallelize_llama.py since 2024, distributed/fsdp.py's "default" policy now): ZeRO-2 here
        zero = 2
    par = ParallelConfig(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=_int(row, "etp", 0), vpp=vpp, mbs=mbs, gbs=gbs,
                         seq=seq, zero=zero, sp=tp > 1,
                         tp_overlap=tp > 1 and (framework == "megatron" or recipes.async_tp(row["other_settings"])),
                         recompute=recompute or "none",
                         precision=row["precision"].strip().lower() or "bf16", framework=framework,
                         schedule="interleaved" if vpp > 1 else "1f1b",
                         compile=row["compile"].strip().lower() in ("yes", "true", "1"), **recipes.knobs(row))
    if framework == "deepspeed" and recipes.checkpoint_offload(row["other_settings"]):
        par = replace(par, offload_layers=model.layers)       # its cpu_checkpointing: every checkpoint
    if framework == "deepspeed" and recipes.tiled_mlp(row["other_settings"]):
        par = replace(par, tiled_mlp=True)
    if gpu_name in BLACKWELL and recipes.cudnn_2025(row) and layout_attention(par, gpu_name) == "cudnn":
        par = replace(par, attention="cudnn-2025")   # a 2025 cuDNN: Blackwell's kernels were slower then
    if gpu.gpus_per_node > per_node:
        # a rack-scale NVLink domain (GB200 NVL72) spans trays of 4: the fast domain is the largest
        # part of the job that fits in one (64 of a rack's 72 GPUs for a power-of-two job)
        per_node = max(k for k in range(per_node, gpu.gpus_per_node + 1) if gpus % k == 0)
    cluster = ClusterSpec(gpu, nodes=max(1, gpus // per_node), gpus_per_node=min(per_node, gpus))
    replicas = recipes.hsdp_replicas(row, dp, cluster.gpus_per_node // (tp * cp))
    if replicas > 1 and zero >= 2:
        par = replace(par, dp_replicate=replicas)
    tps = _float(row, "tokens_per_s_per_gpu")
    if tps is None and _float(row, "step_time_s"):
        # a published step time: the step's tokens (its global batch; one micro-batch per data-
        # parallel rank where the batch is not stated) over the time, per GPU
        tps = gbs * seq / _float(row, "step_time_s") / gpus
    if tps is None and _float(row, "model_tflops_per_gpu"):
        # TFLOP/s counted by the framework's own formula, where that is known (validation.conventions):
        # read before an MFU, whose FLOPs would otherwise be taken as ours
        tps = tokens_from_tflops(row["source_id"], row["framework_version"], _float(row, "model_tflops_per_gpu"),
                                 model, seq, tp)
    if tps is None and _float(row, "mfu") is not None:
        tps = _float(row, "mfu") * gpu.bf16_tflops * 1e12 / model_flops_per_token(model, seq)
    mem = _float(row, "peak_memory_gib")
    return Run(line, row["source_id"], model, cluster, par, tps, mem, row["memory_kind"].strip(), row["note"])


def _float(row, key):
    text = (row.get(key) or "").strip().rstrip("%")
    if not text:
        return None
    value = float(text.replace(",", ""))
    return value / 100 if key == "mfu" and value > 1 else value


@dataclass(frozen=True)
class Scored:
    run: Run
    predicted: float | None           # tokens/s/GPU
    memory_gib: float | None          # predicted peak allocated
    reason: str
    fits: bool | None = None          # the calculators' fit call (MemoryEstimate.fits)

    @property
    def ran(self) -> bool | None:
        """Whether the published run ran (False: its source reports it out of memory)."""
        if self.run.measured or self.run.memory_gib:
            return True
        return False if "out of memory" in self.run.note.lower() else None

    @property
    def error(self):
        return None if self.predicted is None or not self.run.measured else self.predicted / self.run.measured - 1

    def guess_error(self, mfu: float):
        """The error of a constant-MFU guess: `mfu` of the dense bf16 peak on the model's FLOPs."""
        if not self.run.measured:
            return None
        gpu = self.run.cluster.gpu
        return mfu * gpu.bf16_tflops * 1e12 / model_flops_per_token(self.run.model, self.run.par.seq) / \
            self.run.measured - 1


def load(path: Path = DATA) -> tuple[list[Run], list[tuple[int, str]]]:
    """(runs, [(line, why it could not be read)])."""
    runs, skipped = [], []
    if not path.exists():
        return runs, skipped
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                runs.append(_run(line, row))
            except (KeyError, ValueError, ConfigError, ZeroDivisionError, TypeError) as exc:
                skipped.append((line, str(exc)))
    return runs, skipped


def score(run: Run) -> Scored:
    try:
        check_layout(run.model, run.cluster, run.par)
        step = estimate_step(run.model, run.cluster, run.par, default_profile(run.cluster.gpu.name))
        mem = estimate_memory(run.model, run.cluster, run.par)
    except ConfigError as exc:
        return Scored(run, None, None, str(exc))
    return Scored(run, step.tokens_per_s_per_gpu, mem.total_gib, "", mem.fits)


def cell(s: Scored) -> tuple:
    p = s.run.par
    return (p.framework, "MoE" if s.run.model.moe else "dense", p.precision, "seq>8k" if p.seq > 8192 else "seq<=8k",
            f"zero{p.zero}", "pp" if p.pp > 1 else "no pp")


def summary(scored: list[Scored], key=lambda s: "all") -> dict:
    """key -> (runs, median |error|, p90 |error|, median signed, 40%-MFU median, 50%-MFU median)."""
    groups: dict = {}
    for s in scored:
        if s.error is not None:
            groups.setdefault(key(s), []).append(s)
    out = {}
    for k, group in groups.items():
        errs = sorted(abs(s.error) for s in group)
        out[k] = (len(group), statistics.median(errs), errs[min(len(errs) - 1, int(0.9 * len(errs)))],
                  statistics.median(s.error for s in group),
                  statistics.median(abs(s.guess_error(0.4)) for s in group),
                  statistics.median(abs(s.guess_error(0.5)) for s in group))
    return out


def memory_summary(scored: list[Scored]) -> dict:
    """framework -> (runs, median |predicted / measured - 1|); reserved memory is compared with the
    predicted peak allocated times 1.10 (the ratio the nanotron runs measured, validation.memory)."""
    groups: dict = {}
    for s in scored:
        if s.memory_gib and s.run.memory_gib:
            ratio = 1.10 if s.run.memory_kind == "reserved" else 1.0
            groups.setdefault(s.run.par.framework, []).append(abs(s.memory_gib * ratio / s.run.memory_gib - 1))
    return {k: (len(v), statistics.median(v)) for k, v in groups.items()}


def fit_misses(scored: list[Scored]) -> tuple[list[Scored], list[Scored], int, int]:
    """(runs that ran but the calculators call out of memory, runs published as out of memory
    that they call fitting, how many ran, how many ran out of memory)."""
    judged = [s for s in scored if s.fits is not None and s.ran is not None]
    ran = [s for s in judged if s.ran]
    oom = [s for s in judged if not s.ran]
    return [s for s in ran if not s.fits], [s for s in oom if s.fits], len(ran), len(oom)


def fit_line(scored: list[Scored]) -> str:
    """The fit / out-of-memory call (MemoryEstimate.fits) against what the published runs did."""
    called_oom, called_fit, ran, oom = fit_misses(scored)
    return (f"Fit: of {ran} published runs that ran, the memory model calls {len(called_oom)} out of memory; "
            f"of {oom} published out of memory, it calls {len(called_fit)} fitting "
            "(`python -m validation.stacks` lists them).")


def readme_block(scored: list[Scored]) -> str:
    """What README quotes (a test holds it to this): all runs, and the table per cell."""
    n, med, p90, signed, g40, g50 = summary(scored)["all"]
    covered = sum(s.predicted is not None for s in scored)
    lines = [f"{n} runs scored ({covered} of {len(scored)} readable runs expressed): median error {med:.1%}, "
             f"p90 {p90:.1%}, median signed {signed:+.1%}; a constant 40% or 50% MFU guess {g40:.1%} or "
             f"{g50:.1%}.", "",
             "| cell | runs | median abs error | p90 | median signed | 40% MFU | 50% MFU |",
             "|---|---|---|---|---|---|---|"]
    for k, (n, med, p90, signed, g40, g50) in sorted(summary(scored, cell).items()):
        lines.append(f"| {' '.join(k)} | {n} | {med:.1%} | {p90:.1%} | {signed:+.1%} | {g40:.1%} | {g50:.1%} |")
    lines += ["", "Peak memory, median |predicted / measured - 1| (reserved compared with 1.10 x the predicted "
              "peak allocated): " + "; ".join(f"{k} {med:.1%} over {n} runs"
                                              for k, (n, med) in sorted(memory_summary(scored).items())) + ".",
              "", fit_line(scored)]
    return "\n".join(lines)


def peak_bound(scored: list[Scored]) -> dict:
    """{(source, GPU): (runs, median |error| at the bound's low peak, at the taken one, at its high
    one)} for runs on a GPU whose peak the source only bounds (validation.gpus.PEAK_BOUND)."""
    groups = {}
    for s in scored:
        gpu = s.run.cluster.gpu
        if s.error is not None and gpu.name in PEAK_BOUND:
            groups.setdefault((s.run.source, gpu.name), []).append(s)
    out = {}
    for (source, name), group in groups.items():
        ends = []
        for peak in PEAK_BOUND[name]:
            moved = [score(replace(s.run, cluster=replace(s.run.cluster, gpu=at_peak(s.run.cluster.gpu, peak))))
                     for s in group]
            ends.append(statistics.median(abs(m.error) for m in moved if m.error is not None))
        out[(source, name)] = (len(group), ends[0], statistics.median(abs(s.error) for s in group), ends[1])
    return out


def main() -> None:
    runs, skipped = load()
    scored = [score(r) for r in runs]
    print(f"Source: {DATA.name} ({len(runs)} runs read, {len(skipped)} rows not readable)\n")
    print("| run | source | measured tok/s/GPU | predicted | error | 40% MFU guess |")
    print("|---|---|---|---|---|---|")
    for s in scored:
        p = s.run.par
        label = (f"{s.run.model.name} {s.run.cluster.world}x{s.run.cluster.gpu.name} {p.framework} {p.precision} "
                 f"tp{p.tp} pp{p.pp} cp{p.cp} ep{p.ep} z{p.zero}"
                 + (f" hsdp{p.dp_replicate}" if p.dp_replicate > 1 else "")
                 + f" mbs{p.mbs} seq{p.seq} {p.recompute}" + (" compile" if p.compile else "")
                 + (f" attention={p.attention}" if p.attention else "")
                 + (f" elementwise={p.elementwise}" if p.elementwise else "") + (" tiled-mlp" if p.tiled_mlp else ""))
        if s.predicted is None:
            print(f"| {label} | {s.run.source} | {s.run.measured or '-'} | not expressible: {s.reason[:120]} | | |")
        elif s.run.measured:
            print(f"| {label} | {s.run.source} | {s.run.measured:,.0f} | {s.predicted:,.0f} | {s.error:+.0%} | "
                  f"{s.guess_error(0.4):+.0%} |")
    print("\n" + readme_block(scored))
    for name, key in (("all", lambda s: "all"), ("by source", lambda s: s.run.source)):
        print(f"\n{name}:")
        for k, (n, med, p90, signed, g40, g50) in sorted(summary(scored, key).items()):
            print(f"  {k}: {n} runs, median {med:.1%}, p90 {p90:.1%}, signed {signed:+.1%}; "
                  f"constant MFU 40% {g40:.1%}, 50% {g50:.1%}")
    print("\nruns on a GPU whose peak the source only bounds (validation/gpus.py), median |error| at the low "
          "end, at the peak taken, at the high end:")
    for (source, name), (n, low, mid, high) in sorted(peak_bound(scored).items()):
        print(f"  {source} on {name}: {n} runs, {low:.1%} / {mid:.1%} / {high:.1%}")
    print("\nmemory, median |predicted/measured - 1| by framework:")
    for k, (n, med) in sorted(memory_summary(scored).items()):
        print(f"  {k}: {n} runs, {med:.1%}")
    print("\n" + fit_line(scored))
    called_oom, called_fit, _, _ = fit_misses(scored)
    for s in called_oom + called_fit:
        p = s.run.par
        print(f"  line {s.run.line} {s.run.source} ({'ran' if s.ran else 'out of memory'}): {s.run.model.name} "
              f"{s.run.cluster.gpu.name} {p.framework} {p.precision} tp{p.tp} pp{p.pp} cp{p.cp} ep{p.ep} z{p.zero} "
              f"mbs{p.mbs} seq{p.seq} {p.recompute}: {s.memory_gib:.0f} GiB of {s.run.cluster.gpu.memory_gib:.0f}")
    covered = sum(s.predicted is not None for s in scored)
    print(f"\ncoverage: {covered} of {len(scored)} readable runs expressed ({covered / max(1, len(scored)):.0%})")
    for line, why in skipped:
        print(f"  line {line}: {why}")


if __name__ == "__main__":
    main()
