#!/usr/bin/env bash
# Everything this project checks on a lent GPU machine, as one short script (device time is scarce: run it once).
#   here:  bash benchmarks/gpu_wheels.sh       (the wheels the GPU image lacks, into .whl/)
#   there: run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=540)
#          (results under $OUT, or ./gpu_results without it)
# 0. the carried wheels (gymnasium, stable-baselines3, transformers) into /tmp/site; the package from the tree;
# 1. the GPU code paths of the transformers backend (placement, device_map, dtype, batching) on the tiny model;
# 2. batched vs sequential calls per second on the GPU (the same script as on CPU).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-gpu_results}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        2>&1 | tee "$out/pip.txt" | tail -3
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$out/gpu.txt"
python3 - <<'PY' 2>&1 | tee -a "$out/gpu.txt"
import torch, transformers, gymnasium, stable_baselines3, sb3_r2po
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(),
      "| transformers", transformers.__version__, "| gymnasium", gymnasium.__version__,
      "| stable-baselines3", stable_baselines3.__version__, "| sb3_r2po from", sb3_r2po.__file__)
PY
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_llm_transformers_gpu.py tests/test_llm_transformers.py \
    2>&1 | tee "$out/pytest_gpu.txt" | tail -15
timeout 240 python3 benchmarks/batched_calls.py --backends tiny-transformers --ns 1 2 4 8 16 --json "$out/batched_calls_gpu.json" \
    2>&1 | tee "$out/batched_calls_gpu.txt" | tail -15
