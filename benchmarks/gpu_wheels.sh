#!/usr/bin/env bash
# For a GPU machine without network whose image lacks packages (torch, transformers, tokenizers, pytest, ... but no
# gymnasium or stable-baselines3): run this on a machine that has them; it fetches into .whl/ their wheels at the
# versions installed here, transformers too, so that the GPU runs the version the CPU tests ran. .whl/ is
# git-ignored; carry it to the GPU machine with the checkout and run bash benchmarks/gpu_session.sh there
# (for a lent device: run(command="bash benchmarks/gpu_session.sh", carry=[".whl"]))
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir .whl
packages=$(python - <<'PY'
from importlib.metadata import version
# transformers 5.25 needs huggingface-hub >= 2.4 (the GPU image has 1.33) and kernels; the hub needs httpx2
NAMES = ("gymnasium", "farama-notifications", "stable-baselines3", "transformers", "huggingface-hub", "kernels", "tomlkit",
         "httpx2", "httpcore2", "truststore", "hf-xet")
print(" ".join(f"{name}=={version(name)}" for name in NAMES))
PY
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl $packages
ls -l .whl
