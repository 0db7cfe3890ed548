"""Where each config of a sweep runs: how many processes it needs and on how many nodes, the
groups of configs that share one launch, and the key that says a config is already done.

A config says where it runs with launch fields, which are not run options (the suite never
sees them):

    {"world": 4, "model": "tiny", "tp": 2}                     # 4 processes
    {"nodes": 2, "gpus_per_node": 8, "model": "llama3-8b"}     # 16 processes, 8 on each of 2 nodes
    {"dp": 2, "tp": 4, "model": "llama3-8b"}                   # 8: the product of its layout's sizes
    {"model": "llama3-8b", "tp": 4, "pp": 2}                   # 8: dp 1 when it says nothing
    {"suite": "gemm", "m": 8192, "n": 8192, "k": 8192}         # 1: gemm, collectives unless they say

A world of W processes fills nodes of G (the config's gpus_per_node, else `--gpus-per-node`): one
node when W <= G, else W / G nodes, and W that is not a whole number of nodes is an error naming
the config's line; `world` with `nodes` splits evenly. A config that says dp as well must agree
with its world. One group is one launch: its configs need the same nodes x processes per node.

The key of a config is results.run_key of the config as written (launch fields included, suite
apart), as `python -m benchmarks sweep` computes it and runner.run_case records it, so a launch
and a plain sweep agree about what is done, and a config saying world 2 and its twin saying
world 4 are two runs.
"""
from __future__ import annotations

from dataclasses import dataclass

from calculators.specs.errors import ConfigError

from . import results

LAUNCH_FIELDS = ("world", "nodes", "gpus_per_node", "dp")
SUITES = ("train", "collectives", "gemm", "attention")
MAX_WORLD = 65536             # processes of one run: beyond the largest clusters the playbook models


def split(config: dict) -> tuple[str, dict]:
    """(suite, the rest): how a sweep reads a config."""
    rest = dict(config)
    return rest.pop("suite", "train"), rest


def run_fields(config: dict) -> dict:
    """The config without its launch fields: what the suite runs."""
    return {k: v for k, v in config.items() if k not in LAUNCH_FIELDS}


def key(config: dict) -> str:
    return results.run_key(*split(config))


def _size(config: dict, name: str, where: str) -> int:
    value = config.get(name, 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORLD:
        raise ConfigError(f"{where}: {name} must be a whole number from 1 to {MAX_WORLD} (got {value!r})")
    return value


def stated_world(config: dict, where: str = "config") -> int | None:
    """The processes a config asks for by its launch fields, or None when it leaves it to the launch."""
    if "world" in config:
        return _size(config, "world", where)
    if "nodes" in config or "gpus_per_node" in config:
        if not ("nodes" in config and "gpus_per_node" in config):
            raise ConfigError(f"{where}: say nodes and gpus_per_node together, or world")
        return _bounded(_size(config, "nodes", where) * _size(config, "gpus_per_node", where), "nodes*gpus_per_node",
                        where)
    if "dp" in config:
        return world(config, where)
    return None


def world(config: dict, where: str = "config") -> int:
    """The processes a config needs: stated, or dp * tp * cp * pp of a train config, or 1."""
    said = "world" in config or "nodes" in config or "gpus_per_node" in config
    stated = stated_world(config, where) if said else None
    if split(config)[0] != "train" or (stated is not None and "dp" not in config):
        return stated or 1
    product = 1
    for name in ("dp", "tp", "cp", "pp"):
        product *= _size(config, name, where)
    if stated is not None and stated != product:
        raise ConfigError(f"{where}: dp*tp*cp*pp = {product} disagrees with the {stated} processes it asks for")
    return _bounded(product, "dp*tp*cp*pp", where)


def _bounded(n: int, what: str, where: str) -> int:
    if n > MAX_WORLD:
        raise ConfigError(f"{where}: {what} = {n} processes, more than {MAX_WORLD}")
    return n


def placement(config: dict, where: str, gpus_per_node: int | None) -> tuple[int, int]:
    """(nodes, processes per node) of a config; `gpus_per_node` None: this machine only."""
    if split(config)[0] not in SUITES:
        raise ConfigError(f"{where}: suite {split(config)[0]!r} cannot run in a sweep; choose {', '.join(SUITES)}")
    n = world(config, where)
    per = _size(config, "gpus_per_node", where) if "gpus_per_node" in config else gpus_per_node
    if "nodes" in config:
        nodes = _size(config, "nodes", where)
        per_node = per if "gpus_per_node" in config else n // nodes        # world and nodes: split evenly
        if n != nodes * per_node:
            raise ConfigError(f"{where}: {n} processes are not nodes*gpus_per_node = {nodes}*{per_node}")
    elif per is None or n <= per:
        nodes, per_node = 1, n
    elif n % per:
        raise ConfigError(f"{where}: {n} processes are not a whole number of nodes of {per} "
                          f"GPUs: use a multiple of {per}, or say nodes and gpus_per_node")
    else:
        nodes, per_node = n // per, per
    if gpus_per_node is None and nodes > 1:
        raise ConfigError(f"{where}: asks for {nodes} nodes, and the local backend runs on this machine "
                          "only: use --backend slurm or ray")
    return nodes, per_node


@dataclass(frozen=True)
class Group:
    """Configs that run in one launch: `nodes` nodes of `per_node` processes."""
    nodes: int
    per_node: int
    configs: tuple          # (where, config) in file order

    @property
    def world(self) -> int:
        return self.nodes * self.per_node

    @property
    def name(self) -> str:
        return f"world{self.world}-nodes{self.nodes}"

    @property
    def shape(self) -> str:
        return f"{counted(self.nodes, 'node')} x {counted(self.per_node, 'process')}"


def counted(n: int, noun: str) -> str:
    """'1 config', '2 configs', '2 processes'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}{'es' if noun.endswith('s') else 's'}"


def plan(numbered: list[tuple[str, dict]], gpus_per_node: int | None) -> list[Group]:
    """The groups of a sweep, smallest world first (in the order configs first ask for them among
    equals). Every misplaced config is named at once, so one edit fixes them all."""
    by_place: dict[tuple[int, int], list] = {}
    problems = []
    for where, config in numbered:
        try:
            by_place.setdefault(placement(config, where, gpus_per_node), []).append((where, config))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(problems)
    order = sorted(by_place, key=lambda place: place[0] * place[1])        # stable: file order among ties
    return [Group(nodes, per_node, tuple(by_place[nodes, per_node])) for nodes, per_node in order]


def pending(group: Group, done: set) -> list[dict]:
    """The group's configs whose key is not in `done` (the sweep's resume rule)."""
    return [config for _, config in group.configs if key(config) not in done]
