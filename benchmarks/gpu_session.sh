#!/usr/bin/env bash
# The transformers backend on a CUDA GPU: its GPU code paths, and the throughput of batched against sequential calls.
#   1. tests/test_llm_transformers_gpu.py and tests/test_llm_transformers.py on the tiny gpt-oss test model: placement,
#      device_map="auto", dtype, one padded generate per batch on CUDA (the GPU tests are skipped without CUDA);
#   2. python benchmarks/batched_calls.py --backends tiny-transformers --ns 1 2 4 8 16: LLM calls per second, batched vs
#      one after another, on the GPU.
# Results go to $OUT when it is set, else to ./gpu_results: gpu.txt (GPU, driver, versions), pytest_gpu.txt,
# batched_calls_gpu.txt and batched_calls_gpu.json. Each step is cut after 240 s. Nothing is downloaded
# (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1: the tiny model is built by the tests).
#
# On any CUDA machine, from a checkout with the package installed (pip install -e ".[test]"):
#     bash benchmarks/gpu_session.sh
# On a machine whose image lacks gymnasium and stable-baselines3 and has no network: first, on a machine with both,
#     bash benchmarks/gpu_wheels.sh          (their wheels, and this machine's transformers, into .whl/)
# then carry .whl/ along and run the same command there; the wheels are installed into /tmp/site and put on
# PYTHONPATH with the checkout (for a lent device: run(command="bash benchmarks/gpu_session.sh",
# carry=[".whl"], timeout_s=540)).
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
