"""What one benchmark run is: a model, a layout and run options, described with the calculators'
own fields so every result carries the scenario its prediction was made from.

    spec = RunSpec.from_dict({"model": "llama3-1b", "tp": 2, "zero": 3, "gbs": 8, "seq": 4096})
    spec.scenario(world=8, ...)   # the calculators' {"model", "hardware", "parallel"}

`dp` is what the world leaves: world / (tp * cp * pp). Sequence parallelism is on with TP unless
`sp` is false (as Megatron and torchtitan run TP).
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from calculators.specs.errors import ConfigError
from calculators.specs.hf_config import from_hf_config
from calculators.specs.models import ModelSpec, MoESpec
from calculators.specs.parallel import RECOMPUTE, SCHEDULES, ParallelConfig
from calculators.specs.presets import model_from_name
from calculators.scenario import parse_model

# A model small enough for CPU smoke tests and loss-equivalence checks (GQA: 4 heads, 2 kv heads).
TINY = ModelSpec(layers=4, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256, name="tiny",
                 source="harness smoke-test model")
TINY_MOE = replace(TINY, name="tiny-moe", moe=MoESpec(experts=4, top_k=2, expert_ffn=64))
LOCAL_MODELS = {"tiny": TINY, "tiny-moe": TINY_MOE}


def resolve_model(ref) -> ModelSpec:
    """A preset id, 'tiny', a config.json path, or a calculators model dict."""
    if isinstance(ref, ModelSpec):
        return ref
    if isinstance(ref, dict):
        return parse_model(ref)
    if ref in LOCAL_MODELS:
        return LOCAL_MODELS[ref]
    if str(ref).endswith(".json"):
        path = Path(ref)
        if not path.exists():
            raise ConfigError(f"model config {ref!r} not found")
        return from_hf_config(path.read_text())
    return model_from_name(str(ref))


@dataclass(frozen=True)
class RunSpec:
    model: str = "tiny"          # preset id, "tiny", or a config.json path
    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int = 1
    vpp: int = 1
    zero: int = 0                # 0: DDP; 1 and 2: FSDP2 without reshard after forward; 3: FSDP2 full shard
    sp: bool = True              # sequence parallelism when tp > 1
    mbs: int = 1
    gbs: int = 8
    seq: int = 128
    recompute: str = "none"
    schedule: str = "1f1b"
    precision: str = "bf16"      # bf16 (autocast / FSDP2 mixed precision) | fp32 (CPU checks) | fp8
    split: tuple = ()            # layers per pipeline stage (pp*vpp of them interleaved)
    recompute_ranks: tuple = ()  # recompute per pipeline rank, e.g. full,none (then recompute is their most)
    steps: int = 5               # timed steps
    warmup: int = 2
    optimizer: str = "adamw"     # adamw | sgd (sgd is scale-sensitive: the loss-equivalence tests use it)
    lr: float = 3e-4
    seed: int = 0
    compile: bool = False
    device: str = "auto"         # auto | cpu | cuda
    name: str = ""               # a label for the run (smoke cases)

    def __post_init__(self):
        if isinstance(self.split, (list, str)):
            split = self.split.split(",") if isinstance(self.split, str) else self.split
            if not all(re.fullmatch(r"\s*[0-9]{1,7}\s*", str(x)) for x in split if str(x).strip()):
                raise ConfigError("split must list whole numbers of layers per stage, e.g. 4,4 "
                                  f"(got {str(self.split)[:80]!r})")
            object.__setattr__(self, "split", tuple(int(x) for x in split if str(x).strip()))
        if isinstance(self.recompute_ranks, (list, str)):
            modes = self.recompute_ranks.split(",") if isinstance(self.recompute_ranks, str) else self.recompute_ranks
            object.__setattr__(self, "recompute_ranks", tuple(str(m).strip() for m in modes if str(m).strip()))
        p = []
        if self.recompute not in RECOMPUTE:
            p.append(f"recompute must be one of {RECOMPUTE} (got {self.recompute!r})")
        if any(m not in RECOMPUTE for m in self.recompute_ranks):
            p.append(f"recompute-ranks must list one of {RECOMPUTE} per pipeline rank (got {list(self.recompute_ranks)})")
        elif self.recompute_ranks:
            most = max(self.recompute_ranks, key=RECOMPUTE.index)
            if self.recompute not in ("none", most):
                p.append(f"recompute={self.recompute!r} disagrees with recompute-ranks, whose most is {most!r}: "
                         "drop --recompute")
            object.__setattr__(self, "recompute", most)
            if len(self.recompute_ranks) != self.pp:
                p.append(f"recompute-ranks lists {len(self.recompute_ranks)} modes for pp={self.pp} ranks")
        if self.schedule not in SCHEDULES:
            p.append(f"schedule must be one of {SCHEDULES} (got {self.schedule!r})")
        if self.precision not in ("bf16", "fp32", "fp8"):
            p.append(f"precision must be bf16, fp32 or fp8 (got {self.precision!r})")
        if self.optimizer not in ("adamw", "sgd"):
            p.append(f"optimizer must be adamw or sgd (got {self.optimizer!r})")
        if self.ep != 1:
            p.append("expert parallelism is not built in the harness yet: use --ep 1 (MoE layers are "
                     "replicated or sharded by FSDP)")
        if self.steps < 1 or self.warmup < 0:
            p.append("steps must be >= 1 and warmup >= 0")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1e3):   # nan fails both comparisons
            p.append(f"lr must be a learning rate above 0 and below 1,000 (got {self.lr!r})")
        if p:
            raise ConfigError(p)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names - {"suite"})
        if unknown:
            raise ConfigError(f"unknown run option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["split"], d["recompute_ranks"] = list(self.split), list(self.recompute_ranks)
        return d

    def for_rank(self, pp_rank: int) -> "RunSpec":
        """This run as pipeline rank `pp_rank` builds its stages: its own recompute mode."""
        return replace(self, recompute=self.recompute_ranks[pp_rank], recompute_ranks=()) if self.recompute_ranks else self

    def spec(self) -> ModelSpec:
        return resolve_model(self.model)

    def parallel(self, world: int, torch_version: str | None = None) -> ParallelConfig:
        """The calculators' layout for this run on `world` ranks under PyTorch `torch_version` (this
        process's where None: a recorded row gives the one it ran; raises ConfigError when it cannot be)."""
        inner = self.tp * self.cp * self.pp
        if world % inner:
            raise ConfigError(f"world size {world} is not divisible by tp*cp*pp = {inner}; "
                              f"launch a multiple of {inner} processes")
        dp = world // inner
        if self.gbs % (dp * self.mbs):
            raise ConfigError(f"gbs={self.gbs} must be a multiple of dp*mbs = {dp}*{self.mbs}")
        # What the harness runs, in the calculators' words: its "selective" wraps the attention core
        # alone (parallelize.apply_ac), which is Megatron's policy (core_attn), not torchtitan's op-level
        # SAC that "selective" means for fsdp2; its ZeRO 1 and 2 are both FSDP2 without resharding after
        # forward (PyTorch has no separate ZeRO-1): sharded weights, gradients and optimizer state, with
        # the gathered bf16 weights kept from forward to backward, the calculators' fsdp2 ZeRO 2.
        recompute = "core_attn" if self.recompute == "selective" else self.recompute
        ranks = tuple("core_attn" if r == "selective" else r for r in self.recompute_ranks)
        zero = 2 if self.zero == 1 and dp * self.cp > 1 else self.zero
        if world == 1:      # one process: no FSDP, fp32 weights under autocast whatever zero says (train.py)
            zero = 0
        return ParallelConfig(dp=dp, tp=self.tp, pp=self.pp, cp=self.cp, vpp=self.vpp, zero=zero,
                              sp=self.sp and self.tp > 1, mbs=self.mbs, gbs=self.gbs, seq=self.seq,
                              recompute=recompute, schedule=self.schedule,
                              precision="fp8" if self.precision == "fp8" else "bf16",
                              framework="fsdp2", split=self.split or self._v_split(),
                              recompute_ranks=ranks, compile=self.compile,
                              loss="eager",       # torch.compile wraps the blocks only (parallelize.py)
                              elementwise="eager-fused-norm" if not self.compile and _fused_rms_norm(torch_version)
                              else "")

    def _v_split(self) -> tuple:
        """Layers per rank of the harness's ZBV schedule (a V: rank r runs stages r and 2p-1-r)
        for the calculators' zero-bubble estimate, which is ZB-H1, one stage per rank, so that the
        prediction counts the layers each rank really holds. The calculators' own split agrees with
        the harness for gpipe, 1f1b, interleaved and dualpipe."""
        if self.pp == 1 or self.schedule != "zb":
            return ()
        stages = stage_layers(self.spec().layers, 2 * self.pp)
        return tuple(sum(len(stages[s]) for s in stage_ids(r, self.pp, self.schedule, 1)) for r in range(self.pp))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The train/memory CLI: the flags `python -m calculators plan --export harness` writes."""
    for f in fields(RunSpec):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        elif f.name == "split":
            ap.add_argument(flag, default="", help="layers per pipeline stage, e.g. 9,8,8,7 (pp*vpp of them interleaved)")
        elif f.name == "recompute_ranks":
            ap.add_argument(flag, default="", help="recompute per pipeline rank, e.g. full,full,none,none")
        else:
            kind = {"int": int, "float": float}.get(f.type if isinstance(f.type, str) else f.type.__name__, str)
            ap.add_argument(flag, type=kind, default=f.default)


def from_args(ns: argparse.Namespace) -> RunSpec:
    return RunSpec(**{f.name: getattr(ns, f.name) for f in fields(RunSpec)})


def _fused_rms_norm(version: str | None = None) -> bool:
    """Whether PyTorch `version` (this process's where None; False without torch) runs nn.RMSNorm as
    one fused kernel on a GPU (2.8 and later): the harness's eager blocks are then costed with
    kernels.elementwise_kernels' "eager-fused-norm"."""
    if version is None:
        try:
            import torch
        except ImportError:
            return False
        version = torch.__version__
    numbers = [int(x) for x in re.findall(r"\d+", str(version))[:2]]
    return len(numbers) == 2 and tuple(numbers) >= (2, 8)


def read_configs(path: str | Path) -> list[dict]:
    """A sweep file: JSON Lines (or one JSON list) of run dicts, each with a "suite" (default train)."""
    return [config for _, config in numbered_configs(path)]


def numbered_configs(path: str | Path) -> list[tuple[str, dict]]:
    """The configs of a sweep file, each with where it sits ("configs.jsonl:3", or "configs.json:
    config 3" in a JSON list), so that a message about one config can name its line."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the sweep file {str(path)[:200]}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
        if isinstance(data, list):
            items = [(f"{path}: config {n}", item) for n, item in enumerate(data, 1)]
        else:                                     # one object: a one-line JSON Lines file
            first = text[:len(text) - len(text.lstrip())].count("\n") + 1
            items = [(f"{path}:{first}", data)]
    except json.JSONDecodeError:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    items.append((f"{path}:{n}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
    for where, item in items:
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: not a JSON object")
    return items


def stages_per_rank(schedule: str, vpp: int) -> int:
    return vpp if schedule == "interleaved" else 2 if schedule in ("zb", "dualpipe") else 1


def stage_ids(rank: int, p: int, schedule: str, vpp: int) -> list[int]:
    n = stages_per_rank(schedule, vpp)
    if schedule in ("zb", "dualpipe"):
        return [rank, 2 * p - 1 - rank]
    return [rank + i * p for i in range(n)]


def stage_layers(layers: int, stages: int, split: tuple = ()) -> list[list[int]]:
    """Layer indices of each stage: `split` (layers per stage) or as even as possible, the
    earlier stages taking the remainder."""
    if split:
        if len(split) != stages or sum(split) != layers:
            raise ConfigError(f"split {list(split)} must give {stages} stages summing to {layers} layers")
        counts = list(split)
    else:
        if layers < stages:
            raise ConfigError(f"{layers} layers cannot fill {stages} pipeline stages; use fewer stages")
        counts = [layers // stages + (1 if i < layers % stages else 0) for i in range(stages)]
    out, start = [], 0
    for c in counts:
        out.append(list(range(start, start + c)))
        start += c
    return out
