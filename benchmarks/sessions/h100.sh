#!/usr/bin/env bash
# One GPU session of measurements on a single H100 (or H200): the suites that need one GPU only.
#   bash benchmarks/sessions/h100.sh OUTDIR [stage ...]
# Stages: probe gemm attention long train1 train2 train3 memory cp sustained attention-sustained phases extra
# expandable moe (default:
# probe gemm attention long train1 train2 memory cp). Each stage has a wall-clock limit so that one
# slow or hanging stage cannot take the others' time; results append to OUTDIR/<suite>.jsonl (a
# sweep resumes: configs already there are skipped).
set -u
out=${1:?usage: h100.sh OUTDIR [stage ...]}; shift
mkdir -p "$out"
stages=${*:-probe gemm attention long train1 train2 memory cp}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)

stage() {   # stage NAME SECONDS command...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s) $(date +%T)"
  local t0=$SECONDS
  timeout --signal=INT --kill-after=20 "$limit" "$@"
  echo "=== $name rc=$? in $((SECONDS - t0))s"
}

for s in $stages; do
  case $s in
    probe)
      stage probe 60 bash -c "nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,driver_version --format=csv;
        $py -c 'import torch,sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0),
        torch.cuda.get_device_properties(0).multi_processor_count, \"SMs\", torch.backends.cudnn.version(), \"cudnn\")'" ;;
    gemm)
      stage gemm 150 $py -m benchmarks gemm --shapes 8192x8192x8192,4096x4096x4096,16384x16384x16384,2048x2048x2048,1024x1024x1024 \
        --models llama3-8b,llama3-70b,llama3-405b --tps 1,2,4,8 --tokens 8192 --dtypes bf16,fp8 --iters 20 --out "$out/gemm.jsonl" ;;
    attention)   # the FlashAttention papers' grid: 16k tokens, hidden 2048
      stage attention 150 $py -m benchmarks attention --seqs 512,1024,2048,4096,8192,16384 --head-dims 64,128 \
        --gqa 1 --causal true,false --backends flash,cudnn --iters 10 --out "$out/attention.jsonl" ;;
    long)        # long context and GQA, causal
      stage long 150 $py -m benchmarks attention --seqs 4096,32768,131072 --head-dims 128 --gqa 1,8 \
        --causal true --backends flash,cudnn --iters 5 --out "$out/attention.jsonl" ;;
    train1)
      stage train1 240 $py -m benchmarks sweep "$here/h100_train_1.jsonl" --out "$out/train.jsonl" ;;
    train3)      # the fused AdamW (no parameter-sized temporary in its step): the runs it changes most
      stage train3 240 $py -m benchmarks sweep "$here/h100_train_3.jsonl" --out "$out/train.jsonl" ;;
    train2)
      stage train2 300 $py -m benchmarks sweep "$here/h100_train_2.jsonl" --out "$out/train.jsonl" ;;
    memory)      # one rank of multi-GPU layouts, fake process group
      stage memory-8b 90 $py -m benchmarks memory --world 64 --zero 3 --model llama3-8b --seq 8192 --mbs 1 --gbs 64 \
        --steps 1 --warmup 0 --out "$out/memory.jsonl"
      stage memory-8b-full 90 $py -m benchmarks memory --world 64 --zero 3 --model llama3-8b --seq 8192 --mbs 1 --gbs 64 \
        --recompute full --steps 1 --warmup 0 --out "$out/memory.jsonl"
      stage memory-8b-z1 90 $py -m benchmarks memory --world 8 --zero 1 --model llama3-8b --seq 4096 --mbs 1 --gbs 8 \
        --recompute full --steps 1 --warmup 0 --out "$out/memory.jsonl"
      stage memory-70b-z3 120 $py -m benchmarks memory --world 64 --tp 8 --zero 3 --model llama3-70b --seq 8192 --mbs 1 \
        --gbs 8 --recompute full --steps 1 --warmup 0 --out "$out/memory.jsonl"
      stage memory-70b 120 $py -m benchmarks memory --world 64 --tp 8 --zero 1 --model llama3-70b --seq 8192 --mbs 1 \
        --gbs 8 --recompute full --steps 1 --warmup 0 --out "$out/memory.jsonl" ;;
    cp)          # context parallelism, one rank of cp 2 (fake process group: the ring's sends are no-ops)
      stage cp 90 $py -m benchmarks memory --world 2 --cp 2 --zero 3 --model nanotron-1.34b --seq 16384 --mbs 1 \
        --gbs 1 --steps 1 --warmup 0 --out "$out/memory.jsonl" ;;
    sustained)   # a burst against a sustained load (a GEMM, then cuDNN attention at 32k), clocks and power beside
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 500 > "$out/clocks.csv" & smi=$!
      stage sustained 60 $py "$here/sustained.py" 25
      stage sustained-attention 60 $py "$here/sustained.py" 25 attention
      kill $smi ;;
    attention-sustained)   # the attention half of sustained alone, its clocks in their own file
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv -lms 500 > "$out/clocks_attention.csv" & smi=$!
      stage sustained-attention 60 $py "$here/sustained.py" 25 attention
      kill $smi ;;
    phases)      # where one GPU's training memory goes, phase by phase
      stage phases 120 env PYTHONPATH=. $py "$here/memory_phases.py" "$out" nanotron-1.34b 4096 1 none
      stage phases-full 120 env PYTHONPATH=. $py "$here/memory_phases.py" "$out" nanotron-1.34b 4096 2 full ;;
    extra)       # the other kernels, head dim 64 at length, GQA 4
      stage extra 120 $py -m benchmarks attention --seqs 2048,16384,65536 --head-dims 64,128 --gqa 4 \
        --causal true --backends flash,cudnn,efficient --iters 5 --out "$out/attention.jsonl" ;;
    expandable)  # the memory stage's 8B runs under expandable segments, as torchtitan launches: peak
                 # reserved over peak allocated there, where the calculators take the nanotron runs' 1.10
      for rc in none full; do
        stage "memory-8b-expandable-$rc" 90 env PYTORCH_ALLOC_CONF=expandable_segments:True $py -m benchmarks memory \
          --world 64 --zero 3 --model llama3-8b --seq 8192 --mbs 1 --gbs 64 --recompute $rc --steps 1 --warmup 0 \
          --out "$out/memory_expandable.jsonl"
      done ;;
    moe)         # one GPU's share of MoE layers at EP 8 and 32: router, permutation and combine, the experts
                 # as grouped GEMMs and as a per-expert loop, forward and backward, beside the calculators' costs
      stage moe 180 $py -m benchmarks moe --models qwen3-30b-a3b,qwen3-235b-a22b,deepseek-v3,mixtral-8x7b \
        --eps 8,32 --tokens 4096,16384 --dtypes bf16 --iters 10 --out "$out/moe.jsonl" ;;
    *) echo "unknown stage $s" ;;
  esac
done
echo "=== done $(date +%T)"
