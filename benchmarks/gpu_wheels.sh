#!/usr/bin/env bash
# Run HERE before a device session: fetches into .whl/ the wheels the GPU machine's image lacks (it has torch,
# transformers, tokenizers, pytest, ... but no gymnasium or stable-baselines3 and no network), at the versions
# installed here; transformers too, so that the GPU runs the version the CPU tests ran. .whl/ is git-ignored and
# travels with the command:  run(command="bash benchmarks/gpu_session.sh", carry=[".whl"])
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir .whl
packages=$(python - <<'PY'
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in ("gymnasium", "farama-notifications", "stable-baselines3", "transformers")))
PY
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl $packages
ls -l .whl
