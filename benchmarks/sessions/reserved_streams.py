"""Where a rank's reserved memory sits, stream by stream: one rank of the memory suite, then the
caching allocator's segments grouped by the CUDA stream they were allocated on (each stream keeps
its own pool, so what an all-gather or reduce-scatter stream cached cannot serve the compute
stream's peak). Run under PYTORCH_ALLOC_CONF=expandable_segments:True or without it.

    python reserved_streams.py OUT.jsonl MEMORY-SUITE-FLAGS...
e.g. python reserved_streams.py out.jsonl --world 64 --zero 3 --model llama3-8b --seq 8192 --mbs 1 --gbs 64
"""
import json
import os
import sys
from collections import defaultdict

import torch

from benchmarks.__main__ import main as suite


def main():
    out = sys.argv[1]
    suite(["memory", *sys.argv[2:], "--steps", "1", "--warmup", "0"])
    snap = torch.cuda.memory._snapshot()
    pools = defaultdict(lambda: {"segments": 0, "reserved_gib": 0.0, "allocated_gib": 0.0, "largest_segment_gib": 0.0})
    for seg in snap["segments"]:
        p = pools[str(seg["stream"])]
        p["segments"] += 1
        p["reserved_gib"] += seg["total_size"] / 2**30
        p["allocated_gib"] += seg["allocated_size"] / 2**30
        p["largest_segment_gib"] = max(p["largest_segment_gib"], seg["total_size"] / 2**30)
    stats = torch.cuda.memory_stats()
    row = {"flags": sys.argv[2:], "alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", ""),
           "peak_allocated_gib": stats["allocated_bytes.all.peak"] / 2**30,
           "peak_reserved_gib": stats["reserved_bytes.all.peak"] / 2**30,
           "reserved_now_gib": stats["reserved_bytes.all.current"] / 2**30, "streams": dict(pools)}
    with open(out, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
