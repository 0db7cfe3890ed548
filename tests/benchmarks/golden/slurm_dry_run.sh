#!/bin/bash
# Benchmark sweep group world1-nodes1: 1 config on 1 node x 1 process.
# From `python -m benchmarks launch --backend slurm`; submit it from the repository root.
#SBATCH --job-name=bench-world1-nodes1
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --partition=gpu
#SBATCH --account=llm
#SBATCH --time=02:00:00
#SBATCH --output=results/sweep/world1-nodes1-%j.log
set -euo pipefail
mkdir -p results/sweep/configs
cat > results/sweep/configs/world1-nodes1.jsonl <<'CONFIGS'
{"suite": "gemm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"}
CONFIGS
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$HEAD_NODE:$((29500 + SLURM_JOB_ID % 1000))" \
    -m benchmarks sweep results/sweep/configs/world1-nodes1.jsonl --out results/sweep/world1-nodes1.jsonl --device auto
#!/bin/bash
# Benchmark sweep group world8-nodes1: 1 config on 1 node x 8 processes.
# From `python -m benchmarks launch --backend slurm`; submit it from the repository root.
#SBATCH --job-name=bench-world8-nodes1
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --partition=gpu
#SBATCH --account=llm
#SBATCH --time=02:00:00
#SBATCH --output=results/sweep/world8-nodes1-%j.log
set -euo pipefail
mkdir -p results/sweep/configs
cat > results/sweep/configs/world8-nodes1.jsonl <<'CONFIGS'
{"model": "llama3-8b", "tp": 8, "zero": 1, "gbs": 64, "seq": 8192}
CONFIGS
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node 8 --rdzv-backend c10d \
    --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$HEAD_NODE:$((29500 + SLURM_JOB_ID % 1000))" \
    -m benchmarks sweep results/sweep/configs/world8-nodes1.jsonl --out results/sweep/world8-nodes1.jsonl --device auto
#!/bin/bash
# Benchmark sweep group world16-nodes2: 2 configs on 2 nodes x 8 processes.
# From `python -m benchmarks launch --backend slurm`; submit it from the repository root.
#SBATCH --job-name=bench-world16-nodes2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --partition=gpu
#SBATCH --account=llm
#SBATCH --time=02:00:00
#SBATCH --output=results/sweep/world16-nodes2-%j.log
set -euo pipefail
mkdir -p results/sweep/configs
cat > results/sweep/configs/world16-nodes2.jsonl <<'CONFIGS'
{"model": "llama3-8b", "tp": 8, "pp": 2, "schedule": "interleaved", "vpp": 2, "gbs": 64, "seq": 8192}
{"world": 16, "model": "llama3-8b", "tp": 4, "zero": 3, "gbs": 64, "seq": 4096}
CONFIGS
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node 8 --rdzv-backend c10d \
    --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$HEAD_NODE:$((29500 + SLURM_JOB_ID % 1000))" \
    -m benchmarks sweep results/sweep/configs/world16-nodes2.jsonl --out results/sweep/world16-nodes2.jsonl --device auto
#!/bin/bash
# Benchmark sweep group world32-nodes4: 1 config on 4 nodes x 8 processes.
# From `python -m benchmarks launch --backend slurm`; submit it from the repository root.
#SBATCH --job-name=bench-world32-nodes4
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --partition=gpu
#SBATCH --account=llm
#SBATCH --time=02:00:00
#SBATCH --output=results/sweep/world32-nodes4-%j.log
set -euo pipefail
mkdir -p results/sweep/configs
cat > results/sweep/configs/world32-nodes4.jsonl <<'CONFIGS'
{"nodes": 4, "gpus_per_node": 8, "model": "llama3-70b", "tp": 8, "pp": 4, "zero": 1, "gbs": 128, "seq": 8192}
CONFIGS
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node 8 --rdzv-backend c10d \
    --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$HEAD_NODE:$((29500 + SLURM_JOB_ID % 1000))" \
    -m benchmarks sweep results/sweep/configs/world32-nodes4.jsonl --out results/sweep/world32-nodes4.jsonl --device auto
