"""The layout planner: the fastest layouts that fit, for a model, a cluster and a batch.

Alpa's two levels, specialised to transformers:
- inter-operator: how many pipeline stages, and which layers each holds. Layers are split by
  dynamic programming (`balance_split`): the pipeline's step is the sum of the stage times plus
  (m-1) times the slowest, under each stage's memory, so the first stage (which holds the most
  in-flight micro-batches) and the last (output layer and loss) can take fewer layers.
- intra-operator: a transformer layer has a handful of good shardings, so they are enumerated
  rather than solved for: TP (with SP) inside a node, CP and EP inside when they fit, DP and PP
  across (the rank grid of comm.py), ZeRO stage, micro-batch, recompute and schedule (`ilp.py`:
  the integer program Alpa solves for this level on one layer).

Search (`plan`): every valid (tp, cp, ep, pp, dp) is first checked at its most frugal setting
(highest allowed ZeRO stage, most recompute, smallest micro-batch, 1F1B; with one data-parallel
replica ZeRO shards nothing, so only the lowest stage allowed is tried); one that does not fit
there is dropped with its reason. For the rest, every (schedule, vpp, mbs, ZeRO) takes the least
recompute that fits (less recompute is never slower), falling back on an uneven layer split before
recomputing more; each is scored with the closed-form pipeline time (`step.pipeline_time`), and
the best are rebalanced by the DP and timed by the simulator. GPipe only when asked for."""
from __future__ import annotations

import bisect
import time
from dataclasses import replace

from ..specs import limits
from ..specs.errors import ConfigError
from ..specs.validate import check_fields
from .explain import Plan, PlanResult, Rejected, distinct, finalists, oom_reason, rejections, why
from .bound import optimistic
from .impossible import impossible
from ..specs.frameworks import MAX_ZERO_WITH_PP
from ..specs.hardware import ClusterSpec
from ..memory.estimate import estimate_memory, peak_memory, stage_layers, usable_fraction
from ..specs.models import ModelSpec
from ..specs.optimizers import MUON_ZERO
from ..specs.parallel import ZERO_STAGES, ParallelConfig, derive
from ..specs.stages import virtual_split
from ..specs.recompute import order as recompute_order
from ..time.profiles import HardwareProfile, default_profile
from .space import ONE_VALUE, hsdp_replicas, offloaded_checkpoints, one_microbatch, space, structures
from .split import balance_split
from ..time.step import closed_step_time, estimate_step, pipeline_tail, rank_busy, stage_costs, zero_terms

__all__ = ["plan", "balance_split", "Plan", "PlanResult", "Rejected"]

FINALISTS = 12                   # closed-form leaders that are rebalanced and simulated
PRUNE = 1.15                     # skip a structure whose optimistic time is this far behind


# --------------------------------------------------------------------------- the search
def _prefer(allowed: list, smaller: tuple, takes: bool) -> str:
    """The first of `smaller` (less memory, fewer bytes: bf16 gradients or moments, masters as none, remainders
    or 16 bits) the constraints allow, where the framework takes it, else the first other value allowed (a
    list that allows only those keeps its first: its layouts are refused with the framework's reason)."""
    found = next((v for v in smaller if v in allowed), None) if takes else None
    return found or next((v for v in allowed if v not in smaller), allowed[0])


class _Search:
    def __init__(self, model, cluster, profile, seq, gbs, constraints):
        self.model, self.cluster, self.profile, self.seq, self.gbs = model, cluster, profile, seq, gbs
        self.constraints = constraints
        self.space = space(model, cluster, seq, constraints)
        self.framework = constraints.get("framework", "megatron")
        self.uneven = bool(constraints.get("uneven_split", True))
        self.scored: list[tuple[float, ParallelConfig]] = []
        self.times: dict[ParallelConfig, float] = {}
        self.memories: dict = {}            # par -> PeakMemory or the ConfigError it raised
        self.costs: dict = {}               # (par at ZeRO 0, zero_terms) -> its StageCosts
        self.leaders: list[float] = []      # the best FINALISTS closed-form times so far
        self.led: set = set()               # the layouts that fit and were scored
        self.rejected: list[Rejected] = []
        self.count = 0

    def memory(self, par):
        if par not in self.memories:
            try:
                self.memories[par] = peak_memory(self.model, self.cluster, par)
            except ConfigError as exc:
                self.memories[par] = exc
        return self.memories[par]

    def score(self, par, fits: bool = True) -> float:
        """`par`'s closed-form time; one that fits joins the leaders (once, however often asked,
        and also when its time was first asked for as a bound)."""
        if par not in self.times:
            limits.check_time()          # the request's time budget (limits.time_budget), when it has one
            self.count += 1
            self.times[par] = self.closed_time(par)
        t = self.times[par]
        if fits and par not in self.led:
            self.led.add(par)
            bisect.insort(self.leaders, t)
            del self.leaders[FINALISTS:]
        return t

    def stage_costs(self, par):
        """stage_costs, shared by ZeRO stages and HSDP degrees that cost the same inside the pipeline
        (step.zero_terms: FSDP2's ZeRO 2/3 and DeepSpeed's ZeRO 3 copy around their collectives)."""
        key = (derive(par, zero=0, dp_replicate=1) if par.zero or par.dp_replicate > 1 else par, zero_terms(par))
        if key not in self.costs:
            self.costs[key] = stage_costs(self.model, self.cluster, par, self.profile)
        return self.costs[key]

    def closed_time(self, par) -> float:
        """estimate_step's closed-form time."""
        return closed_step_time(self.model, self.cluster, par, self.profile, self.stage_costs(par))

    def floor(self, par) -> float:
        """A lower bound of the simulated step: every op of the busiest rank, one after another
        (m times its work per micro-batch), plus what follows the pipeline."""
        costs = self.stage_costs(par)
        busy = rank_busy(par.schedule, par.pp, par.vpp if par.schedule == "interleaved" else 1, costs)
        return par.microbatches * max(busy) + pipeline_tail(self.model, self.cluster, par, self.profile, costs)[0]

    def pairing(self, pp: int) -> list:
        """DualPipe for an MoE model under a pipeline, where the space allows it. Without one nothing runs by
        that name: Megatron pairs micro-batches with ep_overlap (paired), torchtitan not at all."""
        return ["dualpipe"] if self.model.moe and pp > 1 and "dualpipe" in self.space["schedule"] else []

    def fastest_dispatch(self, par):
        """Of the dispatchers the space allows, the one whose step is shortest here (closed form, same memory):
        DeepEP's measured kernels on Blackwell can be slower than NCCL's all-to-all where a token reaches few
        GPUs (top-2 routing), and the SMs they hold hide less of what they overlap."""
        options = self.space["dispatcher"]
        if len(options) == 1 or self.model.moe is None or par.ep == 1:
            return par
        return min((replace(par, dispatcher=d) for d in options), key=lambda p: self.score(p, fits=False))

    def worth_rebalancing(self, par) -> bool:
        """An uneven split moves layers, it does not remove work: a layout whose even split is
        already well behind the leaders will not catch up (the DP costs a few ms)."""
        if len(self.leaders) < FINALISTS:
            return True
        return self.score(par, fits=False) <= 1.1 * self.leaders[-1]   # even: it may not fit

    def frugal(self):
        """Each (tp, cp, pp, dp, ep) at its most frugal setting, if that fits: its other knobs
        can only add memory, but for FSDP2's one micro-batch per step (one_microbatch), tried
        when the smallest micro-batch does not fit."""
        sp = self.space
        for sizes, invalid in structures(self.model, self.cluster, sp, self.gbs):
            limits.check_time()                  # thousands of structures on a huge cluster, scored or not
            try:
                tp = sizes["tp"] > 1
                single = sizes["pp"] == 1             # one stage runs no pipeline schedule: 1F1B's name for it
                vpp = sp["vpp"][0] if not single and "1f1b" not in sp["schedule"] and \
                    sp["schedule"][0] == "interleaved" else 1
                zero = self.zero_stages(sizes["dp"], sizes["cp"], sizes["pp"])[0]
                base = ParallelConfig(**sizes, sp=tp, tp_overlap=tp and True in sp["tp_overlap"], seq=self.seq,
                                      dispatcher=sp["dispatcher"][0],
                                      experts="fused" if "fused" in sp["experts"] else sp["experts"][0],
                                      grad_dtype=_prefer(sp["grad_dtype"], ("bf16",), self.framework != "nanotron"),
                                      moment_dtype=_prefer(sp["moment_dtype"], ("bf16",), self.framework == "megatron"),
                                      master_dtype=_prefer(sp["master_dtype"], ("none", "remainder", "16bit"),
                                                           self.framework == "megatron"),
                                      fp8_recipe=sp["fp8_recipe"][0], fp8_weights=sp["fp8_weights"][0],
                                      offload_modules=sp["offload_modules"][0], gbs=self.gbs, mbs=min(sp["mbs"]),
                                      **{k: sp[k][0] for k in ONE_VALUE},
                                      zero=zero, recompute=sp["recompute"][-1], precision=sp["precision"][0],
                                      schedule="1f1b" if single or "1f1b" in sp["schedule"] else sp["schedule"][0],
                                      framework=self.framework, vpp=vpp, split=self.virtual_split(sizes["pp"], vpp))
                if invalid:
                    self.rejected.append(Rejected(base, invalid))
                    continue
                base = self.fastest_dispatch(base)
            except ConfigError as exc:
                self.rejected.append(Rejected(ParallelConfig(**sizes), str(exc)))
                continue
            base, mem = offloaded_checkpoints(self.model, self.framework, sp, base, self.memory)
            one = None if isinstance(mem, ConfigError) or mem.fits else one_microbatch(base, sp["mbs"])
            if one:
                alt = replace(base, mbs=one)
                alt_mem = self.memory(alt)
                if not isinstance(alt_mem, ConfigError) and alt_mem.fits:
                    base, mem = alt, alt_mem
            if isinstance(mem, ConfigError):
                self.rejected.append(Rejected(base, str(mem)))
            elif not mem.fits and not (self.uneven and self._balanced(base, mem)):
                self.rejected.append(Rejected(base, "even at its most frugal setting, " + oom_reason(mem),
                                              kind="frugal_oom"))
            else:
                yield base

    def run(self):
        """Best first: structures in order of their optimistic time; one that is already over
        PRUNE x the leaders' time is not expanded (its knobs can only slow it down further)."""
        bases = sorted(((optimistic(self, b, PRUNE), i, b) for i, b in enumerate(self.frugal())), key=lambda x: x[:2])
        for t, _, base in bases:
            if len(self.leaders) >= FINALISTS and t > PRUNE * self.leaders[-1]:
                self.rejected.append(Rejected(base, f"slower: at best {t:.3g} s per step, more than "
                                                    f"{PRUNE - 1:.0%} behind the leaders", t, "slower"))
                continue
            self._expand(base)

    def first_fit(self):
        return next(self.frugal(), None)

    def zero_stages(self, dp: int, cp: int, pp: int) -> list:
        """The ZeRO stages to try, most frugal first (those the framework runs with a pipeline).
        With one data-parallel replica (dp x cp = 1) ZeRO shards nothing: it saves no memory
        (nanotron's ZeRO-1 even adds a gather buffer), so only the lowest stage allowed is
        tried, not a duplicate plan per stage. Muon only at the stages the framework runs it at."""
        cap = MAX_ZERO_WITH_PP.get(self.framework, 3) if pp > 1 else 3
        runs = MUON_ZERO.get(self.framework, ()) if self.space["optimizer"][0] == "muon" else ZERO_STAGES
        stages = sorted((z for z in self.space["zero"] if z <= cap and z in runs), reverse=True) or \
            [min(self.space["zero"])]
        return stages if dp * cp > 1 else stages[-1:]

    def _expand(self, base):
        """Every schedule, ZeRO stage and micro-batch with the least recompute that fits. Memory
        grows with mbs (but for FSDP2's one micro-batch per step, one_microbatch, which the loop
        skips to) and falls with ZeRO, so a micro-batch that does not fit ends its loop and a ZeRO
        stage where nothing fits ends the ZeRO loop."""
        sp = self.space
        schedules = sp["schedule"] if base.pp > 1 else [base.schedule]
        # a recompute level that does not fit one micro-batch size fits no larger one (every rank's
        # activations grow with it) but under FSDP2, whose one micro-batch per step holds less
        monotone = self.framework != "fsdp2"
        for precision in sp["precision"]:
            for schedule in schedules:
                for vpp in (sp["vpp"] if schedule == "interleaved" else [1]):
                    for zero in self.zero_stages(base.dp, base.cp, base.pp):
                        fitted, skip_to, failed = False, 0, set()
                        for mbs in sorted(sp["mbs"]):
                            if self.gbs % (base.dp * mbs) or mbs < skip_to:
                                continue
                            par = derive(base, schedule=schedule, vpp=vpp, mbs=mbs, zero=zero, precision=precision,
                                         split=self.virtual_split(base.pp, vpp))
                            if not self._least_recompute(par, failed if monotone else set()):
                                skip_to = one_microbatch(par, sp["mbs"]) or 0
                                if not skip_to:
                                    break
                                continue
                            fitted = True
                            for replicas in hsdp_replicas(self.framework, self.model, self.cluster, par):
                                self._least_recompute(derive(par, dp_replicate=replicas), set())
                        if not fitted:
                            break

    def paired(self, par):
        """`par` with Megatron's EP overlap (parallel.ep_overlap) where the space allows it and it is valid
        (no full recompute, no 'moe' module; interleaved with a pipeline), if it fits; else None."""
        if True not in self.space["ep_overlap"] or par.ep == 1 or par.ep_overlap or par.schedule == "dualpipe":
            return None
        return self._fitting(replace(par, ep_overlap=True))     # memory() refuses what check_layout does

    def virtual_split(self, p: int, v: int) -> tuple:
        return virtual_split(self.model.layers, p, v, self.framework)

    def _least_recompute(self, par, failed: set) -> bool:
        """Score `par` with the least recompute that fits; False when even the most does not.
        When that needs recompute on a pipeline, also score recompute per rank. `failed`: the
        levels known not to fit (a smaller micro-batch's), skipped and added to."""
        levels = self.space["recompute"]
        frugal = self._fitting(par if par.recompute == levels[-1] else derive(par, recompute=levels[-1]))
        if frugal is None:
            return False

        def fitting(lv):
            if lv in failed:
                return None
            candidate = derive(par, recompute=lv)
            found = self._fitting(candidate)
            if found is None and self._out_of_memory(candidate):
                failed.add(lv)
            return found
        best = next((c for c in map(fitting, levels[:-1]) if c), frugal)
        self.scored += [(self.score(p), p) for p in (best, self.paired(best)) if p is not None]
        if best.recompute != "none" and par.pp == 1 and self.framework == "megatron":
            # activations offloaded instead of recomputed, with the fewest layers that fit
            offloaded = (self._fitting(derive(par, recompute="none", offload_layers=n))
                         for n in sorted(self.space["offload_layers"]) if 0 < n < self.model.layers)
            moved = next((c for c in offloaded if c), None)
            if moved is not None:
                self.scored.append((self.score(moved), moved))
        worth = par.pp > 1 and best.recompute != levels[0] and self.worth_rebalancing(best)
        mixed = self._per_rank(par) if worth else None
        if mixed is not None:
            self.scored.append((self.score(mixed), mixed))
        return True

    def _out_of_memory(self, par) -> bool:
        """Whether `par` is out of memory on every split the planner would try (not a layout error,
        which a larger micro-batch may not have, nor a rebalancing left untried)."""
        mem = self.memory(par)
        if isinstance(mem, ConfigError) or mem.fits:
            return False
        return (not self.uneven or par.pp == 1 or par.vpp > 1 or par.schedule == "dualpipe"
                or mem.sum_gib > par.pp * mem.usable_gib)

    def _per_rank(self, par):
        """Each pipeline rank with the least recompute that fits it (1F1B's first ranks hold more
        micro-batches in flight than its last), then the layers rebalanced: a rank that
        recomputes is slower per layer, so the split gives it fewer. None when one mode fits all."""
        levels = self.space["recompute"]
        mems = {lv: self.memory(derive(par, recompute=lv)) for lv in levels}      # computed by _fitting
        if any(isinstance(m, ConfigError) for m in mems.values()):
            return None
        totals = {lv: m.totals for lv, m in mems.items()}
        usable = usable_fraction(par.framework) * self.cluster.gpu.memory_gib
        modes = [next((lv for lv in levels if totals[lv][r] <= usable), None) for r in range(par.pp)]
        if None in modes or len(set(modes)) == 1:
            return None
        mixed = replace(par, recompute=max(modes, key=recompute_order), recompute_ranks=tuple(modes))
        if self.uneven and par.vpp == 1 and par.schedule != "dualpipe":
            split = balance_split(self.model, self.cluster, mixed, self.profile, usable)
            if split:
                return replace(mixed, split=split)
        return mixed

    def _fitting(self, par):
        """`par` (or `par` with an uneven split) if it fits; else None, with the reason recorded."""
        mem = self.memory(par)
        if isinstance(mem, ConfigError):
            return None
        if mem.fits:
            return par
        split = self._balanced(par, mem) if self.uneven else None
        if split:
            return replace(par, split=split)
        self.rejected.append(Rejected(par, oom_reason(mem), kind="oom"))
        return None

    def _balanced(self, par, mem):
        """An uneven split that fits, when the pipeline's total memory could hold the layers."""
        if par.pp == 1 or par.vpp > 1 or par.schedule == "dualpipe":
            return None
        usable = mem.usable_gib
        if mem.sum_gib > par.pp * usable or not self.worth_rebalancing(par):
            return None
        return balance_split(self.model, self.cluster, par, self.profile, usable)


# ------------------------------------------------------------------------------- the plan
def plan(model: ModelSpec, cluster: ClusterSpec, seq: int, gbs: int, constraints: dict | None = None,
         profile: HardwareProfile | None = None, top: int = 5, only_best: bool = False) -> PlanResult:
    """Ranked layouts that fit, fastest first, with the rejected ones that came closest. only_best: just
    the first is wanted (the budget's): the same one, not simulating finalists whose floor is slower."""
    t0 = time.perf_counter()
    constraints = dict(constraints or {})
    top = constraints.pop("top", top)
    problems = check_fields({"seq": seq, "gbs": gbs, "top": top}, "plan", limits.PLAN)
    if problems:
        raise ConfigError(problems)
    search = _Search(model, cluster, profile or default_profile(cluster.gpu.name), seq, gbs, constraints)
    search.run()
    chosen = finalists([par for _, par in sorted(search.scored, key=lambda x: x[0])], max(3 * top, FINALISTS))
    closed = {}
    for par in chosen:
        key = replace(par, split=())
        for cand in (par, _rebalanced(search, par)):
            if cand is None or (cand is not par and not getattr(search.memory(cand), "fits", False)):
                continue
            t = search.score(cand)
            if key not in closed or t < closed[key][0]:
                closed[key] = (t, cand)
    leaders = distinct(sorted(closed.values(), key=lambda x: (round(x[0], 4), x[1].cp, x[1].zero, x[1].mbs)))
    # the closed form ranks; the simulator (the schedules' real overlap: ZB's W filling the drain, uneven
    # stages) decides among twice as many as are shown
    timed, need = [], 1 if only_best else top
    for _, par in leaders[:2 * top]:
        shown = sorted(p.step.time_s for p in timed)
        if len(shown) >= need and search.floor(par) > shown[need - 1] * (1 + 1e-9):
            continue        # its busiest rank's work alone is slower than every plan shown: skip its simulation
        simulated = _simulated(search, par)
        if simulated is not None:
            timed.append(simulated)
    timed.sort(key=lambda p: p.step.time_s)
    ranked = timed[:top]
    result = PlanResult(plans=ranked, rejected=rejections(search, ranked, leaders[top:top + 2]),
                        why=why(ranked[0], ranked[1]) if len(ranked) >= 2 else "", searched=search.count, seconds=0.0)
    if not ranked:
        result.impossible, result.min_gpus = impossible(search)
    result.seconds = time.perf_counter() - t0
    return result


def _simulated(search, par) -> Plan | None:
    try:
        mem = estimate_memory(search.model, search.cluster, par)
    except ConfigError:
        return None
    if not mem.fits:
        return None
    step = estimate_step(search.model, search.cluster, par, search.profile)
    return Plan(par=par, step=step, memory_gib=mem.total_gib, stage_gib=tuple(s.total_gib for s in mem.stages))


def _rebalanced(search, par):
    if not (search.uneven and par.pp > 1 and par.vpp == 1 and par.schedule != "dualpipe" and not par.split):
        return None
    split = balance_split(search.model, search.cluster, par, search.profile,
                          usable_fraction(par.framework) * search.cluster.gpu.memory_gib)
    even = tuple(len(x) for x in stage_layers(search.model, par))
    return replace(par, split=split) if split and split != even else None
