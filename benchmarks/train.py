"""The train suite: build the layout, run warm-up then timed steps, measure, predict, record.

Launched by torchrun (every rank runs `train`; rank 0 writes the row) or as one process. Each
step consumes one global batch of gbs sequences, generated from (seed, step) so every layout
sees the same tokens: a data-parallel rank takes its slice, CP ranks their part of the sequence,
pipeline stages the micro-batches. The loss reported is the global batch's mean token loss.

Timing: the step is timed end to end (forward, backward, optimizer) after a device synchronise
and a barrier, so the slowest rank sets it, as it does in training.
"""
from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.distributed as dist

from calculators.specs.errors import ConfigError
from calculators.time.flops import model_flops_per_token
from calculators.specs.parallel import check_layout
from calculators.scenario import parse_hardware

from . import host, pipeline
from . import predict as predict_
from .model import Transformer, init_weights, loss_fn, rope_table
from .parallelize import apply_ddp, build_mesh, parallelize


def global_batch(run, step: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(gbs, seq) tokens and next-token labels of step `step`, the same on every rank.

    Each sequence counts up from a random start by a random stride of 1 to 4 (mod vocab): a
    pattern a model learns in a few steps, so the loss-equivalence tests compare a falling loss."""
    gen = torch.Generator().manual_seed(run.seed * 7919 + step)
    start = torch.randint(0, vocab, (run.gbs, 1), generator=gen)
    stride = torch.randint(1, 5, (run.gbs, 1), generator=gen)
    data = (start + stride * torch.arange(run.seq + 1)) % vocab
    return data[:, :-1], data[:, 1:]


def build_model(spec, run, stage=0, n_stages=1, layers=None):
    """The model (or one pipeline stage) on the meta device: parallelize it, then `materialize`."""
    with torch.device("meta"):
        model = Transformer(spec, run.seq)
    if layers is not None:
        pipeline.trim_to_stage(model, stage, n_stages, layers)
    return model


def materialize(model, spec, run, device):
    """Allocate the (sharded) weights on `device` and give them their deterministic values."""
    model.to_empty(device=device)
    # to_empty gives every module its own new tensor, so an unsharded model's tied output weight
    # would come back as a second matrix (FSDP2 keeps the tie: it manages the shared parameter once)
    if spec.tied_embeddings and model.output is not None and model.tok_embeddings is not None \
            and model.output.weight is not model.tok_embeddings.weight:
        model.output.weight = model.tok_embeddings.weight
    model.rope = rope_table(run.seq, spec.head_dim).to(device)
    init_weights(model, run.seed)
    return model


def _part(spec, run, device, mesh, dp_mesh, *stage):
    model = build_model(spec, run, *stage)
    parallelize(model, mesh, dp_mesh, run)
    return apply_ddp(materialize(model, spec, run, device), dp_mesh, run.zero, device)


def _implementation(opt) -> str:
    """How the optimizer steps (fused, foreach or a loop over tensors): it changes the step's peak."""
    group = opt.param_groups[0]
    how = "fused" if group.get("fused") else "foreach" if group.get("foreach") else "for-loop"
    return f"{type(opt).__name__} {how}"


def _optimizer(params, run):
    """AdamW as torchtitan runs it by default: the fused kernel on a GPU (the foreach form allocates
    a parameter-sized fp32 temporary in every step, 4 bytes per parameter at the peak, which an H100
    run of the 3.57B measured: benchmarks/sessions/h100.sh, validation/data/h100_harness); foreach
    on a CPU, where the loss-equivalence tests run."""
    if run.optimizer == "sgd":
        return torch.optim.SGD(params, lr=run.lr)
    cuda = bool(params) and params[0].device.type == "cuda"
    return torch.optim.AdamW(params, lr=run.lr, betas=(0.9, 0.95), weight_decay=0.1,
                             fused=True if cuda else None, foreach=None if cuda else True)


def validate(spec, run, par, g: host.Grid, hw: dict, device: torch.device) -> None:
    cluster = parse_hardware(hw)
    problems = check_layout(spec, cluster, par) if cluster.world == par.world else []
    if par.world != g.world:
        problems.append(f"the layout needs {par.world} ranks, launched with {g.world}")
    if run.cp > 1 and device.type != "cuda":
        problems.append("context parallelism needs GPUs (its ring attention has no CPU kernels): use --cp 1 on CPU")
    if run.pp > 1 and spec.tied_embeddings:
        problems.append("pipeline parallelism with tied embeddings is not supported by the harness: use an untied model")
    if run.tp > 1 and spec.tied_embeddings:
        problems.append("tensor parallelism with tied embeddings is not supported by the harness (its plan shards the "
                        "embedding by rows and the output by columns, which would untie them): use an untied model")
    if run.precision == "fp8":
        problems.append("fp8 training is not built in the harness yet (it needs torchao's Float8Linear): use bf16")
    if problems:
        raise ConfigError(problems)


class Trainer:
    """One layout on this rank: the model part(s), the optimizer and how to run a step."""

    def __init__(self, spec, run, par, g: host.Grid, device: torch.device):
        self.run, self.par, self.device, self.g = run, par, device, g
        self.mesh, self.dp_mesh = build_mesh(device.type, par.pp, par.dp, par.cp, par.tp) if g.world > 1 else (None, None)
        self.autocast = run.precision == "bf16" and (run.zero == 0 or par.dp * par.cp == 1)
        if par.pp > 1:
            p_rank = self.mesh["pp"].get_local_rank()
            n_stages = par.pp * pipeline.stages_per_rank(run.schedule, run.vpp)
            pipeline.check(run, spec.layers, par.microbatches, par.pp)
            ids = pipeline.stage_ids(p_rank, par.pp, run.schedule, run.vpp)
            split = pipeline.stage_layers(spec.layers, n_stages, run.split)
            mine = run.for_rank(p_rank)
            self.parts = [_part(spec, mine, device, self.mesh, self.dp_mesh, i, n_stages, split[i]) for i in ids]
            self.schedule = pipeline.build_schedule(self.parts, ids, n_stages, self.mesh["pp"].get_group(), device,
                                                    run.schedule, par.microbatches, loss_fn)
            self.has_first = 0 in ids
            self.has_last = n_stages - 1 in ids
        else:
            self.parts = [_part(spec, run, device, self.mesh, self.dp_mesh)]
            self.schedule = None
        self.opt = _optimizer([p for m in self.parts for p in m.parameters()], run)
        self.dp_rank = self.mesh["dp"].get_local_rank() if self.mesh is not None else 0

    def _context(self, *buffers):
        ctx = contextlib.ExitStack()
        if self.autocast:
            ctx.enter_context(torch.autocast(self.device.type, dtype=torch.bfloat16))
        if self.par.cp > 1:
            from torch.distributed.tensor.experimental import context_parallel
            rope = self.parts[0].rope
            ctx.enter_context(context_parallel(self.mesh["cp"], buffers=[*buffers, rope],
                                               buffer_seq_dims=[1] * len(buffers) + [0]))
        return ctx

    def step(self, step: int, vocab: int) -> float:
        """One optimizer step; returns the global batch's mean loss (on every rank)."""
        tokens, labels = global_batch(self.run, step, vocab)
        per = self.par.gbs // self.par.dp
        tokens = tokens[self.dp_rank * per:(self.dp_rank + 1) * per].to(self.device)
        labels = labels[self.dp_rank * per:(self.dp_rank + 1) * per].to(self.device)
        total = torch.zeros((), device=self.device)
        if self.schedule is not None:
            losses = []
            with self._context(tokens, labels):
                self.schedule.step(*([tokens] if self.has_first else []),
                                   target=labels if self.has_last else None, losses=losses)
            if self.has_last:
                total += torch.stack(losses).mean().detach().float()
        else:
            model, m = self.parts[0], self.par.microbatches
            for i in range(m):
                x, y = (t[i * self.par.mbs:(i + 1) * self.par.mbs] for t in (tokens, labels))
                last = i == m - 1
                sync = model.no_sync() if hasattr(model, "no_sync") and not last else contextlib.nullcontext()
                if hasattr(model, "set_requires_gradient_sync"):
                    model.set_requires_gradient_sync(last)
                with sync, self._context(x, y):
                    loss = loss_fn(model(x), y) / m
                    loss.backward()
                total += loss.detach().float()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.mesh is not None:                  # mean over dp (x cp); pp: only the last stage has it
            dist.all_reduce(total)
            total /= self.par.dp * self.par.cp * self.par.tp    # ranks that computed a loss
        return float(total)


def measure(run, g: host.Grid, device: torch.device) -> tuple[dict, dict]:
    """Run warm-up and timed steps; returns (metrics, scenario). Raises on OOM (caller records it)."""
    spec = run.spec()
    par = run.parallel(g.world)
    hw = host.hardware(device, g)
    validate(spec, run, par, g, hw, device)
    scenario = scenario_of(run, g, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer = Trainer(spec, run, par, g, device)
    losses, times = [], []
    for step in range(run.warmup + run.steps):
        host.synchronize(device)
        if dist.is_initialized():
            dist.barrier()
        t0 = time.perf_counter()
        losses.append(trainer.step(step, spec.vocab))
        host.synchronize(device)
        times.append(time.perf_counter() - t0)
    timed = times[run.warmup:]
    step_time = statistics.median(timed)
    tps = par.gbs * par.seq / step_time / g.world
    metrics = {"step_time_s": step_time, "step_times_s": timed, "tokens_per_s_per_gpu": tps,
               "mfu": tps * model_flops_per_token(spec, par.seq) / (host.peak_tflops(hw, par.precision) * 1e12),
               "losses": losses, "optimizer": _implementation(trainer.opt)}
    metrics.update(_memory(device))
    return metrics, scenario


def scenario_of(run, g: host.Grid, device: torch.device) -> dict:
    """The calculators' scenario of this run on this process grid (what its prediction is made from)."""
    return predict_.scenario(run, host.hardware(device, g), g.world)


def _memory(device: torch.device) -> dict:
    """Peak allocated and reserved GiB per rank (the most loaded rank first); CUDA only."""
    if device.type != "cuda":
        return {}
    mine = [torch.cuda.max_memory_allocated(device) / 2**30, torch.cuda.max_memory_reserved(device) / 2**30]
    every = [None] * dist.get_world_size() if dist.is_initialized() else [mine]
    if dist.is_initialized():
        dist.all_gather_object(every, mine)
    return {"peak_allocated_gib": max(a for a, _ in every), "peak_reserved_gib": max(r for _, r in every),
            "peak_allocated_gib_per_rank": [a for a, _ in every]}


def predict(scenario: dict) -> dict:
    return predict_.train(scenario)

