#!/usr/bin/env bash
# Everything this project checks on a lent GPU machine, as one short script (device time is scarce: run it once).
#   run: bash benchmarks/gpu_session.sh        (results under $OUT, or ./gpu_results without it)
# 1. the GPU code paths of the transformers backend (placement, device_map, dtype, batching) on the tiny model;
# 2. batched vs sequential calls per second on the GPU (the same script as on CPU).
set -u
out="${OUT:-gpu_results}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" | tee -a "$out/gpu.txt"
timeout 240 python -m pytest -q -p no:cacheprovider tests/test_llm_transformers_gpu.py tests/test_llm_transformers.py \
    2>&1 | tee "$out/pytest_gpu.txt" | tail -5
timeout 240 python benchmarks/batched_calls.py --backends tiny-transformers --ns 1 2 4 8 16 --json "$out/batched_calls_gpu.json" \
    2>&1 | tee "$out/batched_calls_gpu.txt" | tail -15
