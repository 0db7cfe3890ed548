"""Layers per pipeline stage where the layers do not divide the stages evenly: Megatron's
embedding-and-loss-aware split, and the split an interleaved layout needs."""
from __future__ import annotations

from .errors import ConfigError


def megatron_split(layers: int, stages: int) -> tuple:
    """Layers per pipeline stage as Megatron-LM places them with
    --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split: the
    embedding and the loss each take one layer's place, in the first and the last stage, so
    (layers + 2) must divide evenly (126 layers over 64 stages: 1, 2, ..., 2, 1; over 128 stages
    the first stage holds only the embedding and the last only the loss, 0, 1, ..., 1, 0, as
    Megatron-Bridge runs Llama 3 405B at pp 16, vpp 8)."""
    if stages < 2 or (layers + 2) % stages or layers < stages - 2:
        raise ConfigError([f"Megatron's embedding-and-loss split needs layers + 2 = {layers + 2} divisible by "
                           f"the {stages} pipeline stages"])
    n = (layers + 2) // stages
    return (n - 1,) + (n,) * (stages - 2) + (n - 1,)


def virtual_split(layers: int, p: int, v: int, framework: str = "megatron") -> tuple:
    """The split an interleaved layout (v > 1) needs, each stage holding whole layers: () where
    p*v divides the layers; else Megatron's embedding-and-loss split when Megatron runs it and
    it exists (Llama 3 405B: 126 layers over 16 x 2 stages, 3, 4, ..., 4, 3); else () (invalid)."""
    if v == 1 or framework != "megatron" or layers % (p * v) == 0:
        return ()
    try:
        return megatron_split(layers, p * v)
    except ConfigError:
        return ()
