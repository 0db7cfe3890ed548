"""Model shapes and exact parameter counts.

One description, `ModelSpec`, covers dense and MoE decoders (GQA, SwiGLU or 2-matrix MLP, tied or
untied embeddings, biases, learned positions, MLA). Every weight matrix of a layer is listed once,
by `layer_matmuls`, and everything else (parameter counts, FLOPs, tensor-parallel shards) is
derived from that list, so the three can never disagree.

Symbols (shared/DESIGN.md): L layers, h hidden, a heads, k kv_heads, f ffn, V vocab, E experts,
K top_k.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from . import limits
from .errors import ConfigError, require
from .validate import check_fields, show


@dataclass(frozen=True)
class MoESpec:
    experts: int                 # E routed experts per MoE layer
    top_k: int                   # K experts per token
    expert_ffn: int              # intermediate size of one routed expert
    shared_experts: int = 0      # always-active experts (DeepSeek, Qwen-MoE)
    shared_ffn: int = 0          # intermediate size of one shared expert (0: expert_ffn)
    dense_layers: int = 0        # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    moe_every: int = 1           # every n-th layer after the dense ones is MoE (1: all)
    groups: int = 0              # group-limited routing: the experts in this many equal groups
                                 # (DeepSeek's n_group; 0: no limit) ...
    groups_per_token: int = 0    # ... and a token's top_k taken from at most this many (topk_group)

    def __post_init__(self):
        p = check_fields(self, "model.moe", limits.MOE)
        if not p and self.groups:
            require(p, self.experts % self.groups == 0,
                    f"model.moe.groups={self.groups} must divide model.moe.experts={self.experts}")
            require(p, 1 <= self.groups_per_token <= self.groups,
                    f"model.moe.groups_per_token must be from 1 to groups={self.groups} "
                    f"(got {self.groups_per_token})")
            require(p, p or self.top_k <= self.groups_per_token * self.experts // self.groups,
                    f"model.moe.top_k={self.top_k} must be at most the experts of groups_per_token groups "
                    f"({self.groups_per_token} x {self.experts // max(1, self.groups)})")
        if p:
            raise ConfigError(p)

    @property
    def group_limit(self) -> tuple[int, int]:
        """(groups, groups a token draws from) where routing is group-limited, else (0, 0)."""
        limited = self.groups > 1 and 0 < self.groups_per_token < self.groups
        return (self.groups, self.groups_per_token) if limited else (0, 0)


@dataclass(frozen=True)
class MLASpec:
    """DeepSeek multi-head latent attention: low-rank q and joint kv compression."""
    q_lora_rank: int             # 0: q projected directly from h
    kv_lora_rank: int
    qk_nope_dim: int
    qk_rope_dim: int
    v_head_dim: int

    def __post_init__(self):
        p = check_fields(self, "model.mla", limits.MLA)
        if p:
            raise ConfigError(p)


@dataclass(frozen=True)
class Matmul:
    """One weight matrix of a layer. `stored` copies live in memory; `used` copies touch a token."""
    name: str
    fan_in: int
    fan_out: int
    tp: str                      # "col", "row" (sharded by TP) or "rep" (replicated)
    stored: int = 1
    used: float = 1.0
    expert: bool = False         # routed expert weight: sharded by ep (and etp), not tp
    bias: bool = False

    @property
    def params(self) -> int:
        return self.stored * (self.fan_in * self.fan_out + (self.fan_out if self.bias else 0))


@dataclass(frozen=True)
class ModelSpec:
    layers: int                  # L
    hidden: int                  # h
    heads: int                   # a
    ffn: int                     # f, dense MLP intermediate size
    vocab: int                   # V
    kv_heads: int = 0            # k (0: = heads, i.e. MHA)
    head_dim: int = 0            # 0: hidden // heads
    tied_embeddings: bool = False
    mlp: str = "swiglu"          # "swiglu" (gate, up, down) or "gelu" (up, down)
    norm: str = "rmsnorm"        # "rmsnorm" (weight) or "layernorm" (weight and bias)
    bias: bool = False           # biases on every linear (GPT-2, GPT-NeoX)
    qkv_bias: bool = False       # biases on q, k, v only (Qwen2)
    qk_norm: bool = False        # per-head RMSNorm on q and k (Qwen3)
    positions: int = 0           # learned absolute position embeddings (GPT-2); 0 for RoPE
    window: int = 0              # sliding-window attention's span in tokens (Mistral 7B v0.1, Gemma 2/3); 0: none
    window_layers: int = 0       # the layers that attend within it; the others attend to the whole sequence
    chunked: bool = False        # those layers attend within fixed blocks of `window` tokens (Llama 4's chunked
                                 # attention), not a span sliding with each token
    glu_limit: float = 0.0       # the GLU's halves clamped to this before the activation (gpt-oss's
                                 # swiglu_limit, 7); 0: no clamp
    sinks: bool = False          # a learned logit per head joins each softmax's denominator (gpt-oss's
                                 # attention sinks; Transformer Engine's softmax_type "learnable")
    yarn: bool = False           # RoPE scaled by YaRN (gpt-oss; long-context Qwen configs): Megatron applies
                                 # it unfused (its position_embedding_type yarn turns rope fusion off)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    name: str = "custom"
    source: str = field(default="", compare=False)

    def __post_init__(self):
        p = check_fields(self, "model", limits.MODEL, flags=("tied_embeddings", "bias", "qkv_bias", "qk_norm",
                                                                        "chunked", "sinks", "yarn"),
                         choices={"mlp": ("swiglu", "gelu"), "norm": ("rmsnorm", "layernorm")}, texts=("name",))
        for key, cls in (("moe", MoESpec), ("mla", MLASpec)):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), cls):
                p.append(f"model.{key} must be an object like {cls.__name__}'s fields (got {show(getattr(self, key))})")
        if p:                                    # types first: the rules below do arithmetic on them
            raise ConfigError(p)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim == 0 and self.heads > 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        p: list[str] = []
        for key in ("layers", "hidden", "heads", "vocab", "head_dim"):
            require(p, getattr(self, key) > 0, f"model.{key} must be a positive integer (got {getattr(self, key)})")
        require(p, self.window_layers <= self.layers and (self.window > 0) == (self.window_layers > 0),
                f"model.window_layers={self.window_layers} must be from 1 to layers={self.layers} with a window, "
                f"0 without one (window={self.window})")
        require(p, not self.chunked or self.window_layers > 0,
                "model.chunked=true needs window and window_layers: the chunk's size and the layers that use it")
        e = self.moe
        dense = self.layers if e is None else self.dense_mlp_layers if e.moe_every >= 1 and e.dense_layers >= 0 else 1
        require(p, self.ffn > 0 or dense == 0,
                f"model.ffn must be positive (got {self.ffn}): {dense} layer(s) have a dense MLP")
        require(p, self.heads > 0 and self.kv_heads > 0 and self.heads % self.kv_heads == 0,
                f"model.heads={self.heads} must be a multiple of kv_heads={self.kv_heads} (GQA groups)")
        if self.moe is not None:
            e = self.moe
            require(p, e.experts >= 1 and 1 <= e.top_k <= e.experts,
                    f"model.moe.top_k={e.top_k} must be between 1 and model.moe.experts={e.experts}")
            require(p, e.expert_ffn > 0, f"model.moe.expert_ffn must be positive (got {e.expert_ffn})")
            require(p, 0 <= e.dense_layers < self.layers,
                    f"model.moe.dense_layers={e.dense_layers} must be below layers={self.layers}")
            require(p, e.moe_every >= 1, f"model.moe.moe_every must be >= 1 (got {e.moe_every})")
        if p:
            raise ConfigError(p)

    # ---- structure -----------------------------------------------------------------------
    def is_moe_layer(self, i: int) -> bool:
        e = self.moe
        return e is not None and i >= e.dense_layers and (i - e.dense_layers) % e.moe_every == 0

    @cached_property
    def layer_kinds(self) -> tuple:
        """The kinds of layer the model has: (False,) dense, (True,) all MoE, (False, True) both."""
        return tuple(sorted({self.is_moe_layer(i) for i in range(self.layers)}))

    def moe_layers_in(self, layers) -> int:
        if self.moe is None:
            return 0
        key = tuple(layers)
        counts = self._moe_counts
        count = counts.get(key)        # the planner asks for the same ranks' layers thousands of times
        if count is None:
            if len(counts) > 4096:
                counts.clear()
            count = counts[key] = sum(self.is_moe_layer(i) for i in key)
        return count

    @cached_property
    def _moe_counts(self) -> dict:
        return {}

    @cached_property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def dense_mlp_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def q_dim(self) -> int:        # width of q (and of k in MHA/MLA): a * d_qk
        return self.heads * (self.mla.qk_nope_dim + self.mla.qk_rope_dim if self.mla else self.head_dim)

    @property
    def kv_dim(self) -> int:       # width of k and of v for GQA
        return self.kv_heads * self.head_dim

    @property
    def attn_out_dim(self) -> int:  # width of the attention output entering o_proj
        return self.heads * (self.mla.v_head_dim if self.mla else self.head_dim)

    def layer_matmuls(self, moe_layer: bool) -> tuple[Matmul, ...]:
        key = "_mm_moe" if moe_layer else "_mm_dense"
        if key not in self.__dict__:                     # cached: the planner asks often
            object.__setattr__(self, key, _layer_matmuls(self, moe_layer))
        return self.__dict__[key]

    # ---- parameter counts ----------------------------------------------------------------
    @property
    def norm_params(self) -> int:  # one norm over h
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def layer_norm_params(self) -> int:    # the norms' weights, and the attention's sink logits
        qk = 2 * (self.mla.qk_nope_dim + self.mla.qk_rope_dim if self.mla else self.head_dim) if self.qk_norm else 0
        mla = (self.mla.q_lora_rank + self.mla.kv_lora_rank) if self.mla else 0
        return 2 * self.norm_params + qk + mla + (self.heads if self.sinks else 0)

    def layer_params(self, i: int) -> int:
        mm = self.layer_matmuls(self.is_moe_layer(i))
        return sum(m.params for m in mm) + self.layer_norm_params()

    def layer_active_params(self, i: int) -> float:
        mm = self.layer_matmuls(self.is_moe_layer(i))
        return sum(m.params / m.stored * m.used for m in mm) + self.layer_norm_params()

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden + self.positions * self.hidden

    @property
    def output_params(self) -> int:  # final norm + output layer (0 weights when tied)
        return self.norm_params + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @cached_property
    def total_params(self) -> int:
        return self.embedding_params + sum(self.layer_params(i) for i in range(self.layers)) + self.output_params

    @cached_property
    def active_params(self) -> float:
        return (self.embedding_params + sum(self.layer_active_params(i) for i in range(self.layers))
                + self.output_params)

    def describe(self) -> str:
        kind = f"MoE {self.moe.experts}x top-{self.moe.top_k}" if self.moe else "dense"
        kind_of = "chunked attention" if self.chunked else "sliding window"
        window = f", {kind_of} {self.window:,} on {self.window_layers} layers" if self.window_layers else ""
        return (f"{self.name}: {self.total_params / 1e9:.2f}B params ({kind}), L={self.layers} h={self.hidden} "
                f"a={self.heads} k={self.kv_heads} f={self.ffn} V={self.vocab}{window}")


def _mlp(prefix: str, h: int, f: int, swiglu: bool, bias: bool, **kw) -> list[Matmul]:
    ups = ["gate", "up"] if swiglu else ["up"]
    return ([Matmul(f"{prefix}{u}", h, f, "col", bias=bias, **kw) for u in ups]
            + [Matmul(f"{prefix}down", f, h, "row", bias=bias, **kw)])


def _layer_matmuls(m: ModelSpec, moe_layer: bool) -> tuple[Matmul, ...]:
    h, b, qb = m.hidden, m.bias, m.bias or m.qkv_bias
    if m.mla:
        x = m.mla
        dqk = x.qk_nope_dim + x.qk_rope_dim
        q = ([Matmul("q_a", h, x.q_lora_rank, "rep"), Matmul("q_b", x.q_lora_rank, m.heads * dqk, "col")]
             if x.q_lora_rank else [Matmul("q", h, m.heads * dqk, "col")])
        attn = q + [Matmul("kv_a", h, x.kv_lora_rank + x.qk_rope_dim, "rep"),
                    Matmul("kv_b", x.kv_lora_rank, m.heads * (x.qk_nope_dim + x.v_head_dim), "col"),
                    Matmul("o", m.attn_out_dim, h, "row")]
    else:
        attn = [Matmul("q", h, m.q_dim, "col", bias=qb), Matmul("k", h, m.kv_dim, "col", bias=qb),
                Matmul("v", h, m.kv_dim, "col", bias=qb), Matmul("o", m.attn_out_dim, h, "row", bias=b)]
    swiglu = m.mlp == "swiglu"
    if not moe_layer:
        return tuple(attn + _mlp("", h, m.ffn, swiglu, b))
    e = m.moe
    mlp = [Matmul("router", h, e.experts, "rep")]
    mlp += _mlp("expert_", h, e.expert_ffn, swiglu, b, stored=e.experts, used=e.top_k, expert=True)
    if e.shared_experts:
        mlp += _mlp("shared_", h, e.shared_ffn or e.expert_ffn, swiglu, b, stored=e.shared_experts,
                    used=e.shared_experts)
    return tuple(attn + mlp)
