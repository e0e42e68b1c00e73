#!/usr/bin/env bash
# One prepared run for a session that is lent a GPU (see the device tool's README): installs the
# project, then checks every GPU path in one go. Each step prints its own result; nothing stops early.
#   bash bench/gpu_session.sh   (about 5 minutes on an H200)
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q "torch==2.13.0" -e ".[dev]" 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== backends on the GPU (cpu, triton, cuda; CUDA-event timing, kernel-name proof)"
timeout 300 python3 bench/gpu_check.py
echo "== GPU-only tests"
timeout 300 python3 -m pytest -q -x tests/evaluate/test_backends.py -k "gpu or profiler or cuda or triton"
echo "== advantage estimators vs per-group loops on the GPU"
timeout 300 python3 bench/bench_rl_estimators.py --device cuda --repeats 5
