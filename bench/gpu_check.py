"""Run the shipped example on every backend and print verdicts and timings (real on an NVIDIA GPU).

On a GPU machine the triton and cuda backends run for real, timed with CUDA events (all streams
synchronised, L2 flushed between trials); without one, triton runs under the interpreter and cuda
is compiled only. Exit status 1 if any backend's verdict is not what this machine should give.

    python bench/gpu_check.py [--gpu-scale 8]
"""

from __future__ import annotations

import argparse
import sys

import torch

from kernelrl.evaluate import Candidate, EvalConfig, EvalPool
from kernelrl.tasks import example_path, load_task, resize


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-scale", type=float, default=8.0, help="scale the task's sizes on a GPU")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    task = load_task(example_path("scale_bias_relu.py"))
    if gpu:
        task = resize(task, scale=args.gpu_scale)
    print(f"device: {torch.cuda.get_device_name() if gpu else 'cpu only'}; task sizes {task.size_overrides or 'as shipped'}")
    expected = {"cpu": "ok", "triton": "ok", "cuda": "ok" if gpu else "compiled"}
    failures = 0
    with EvalPool(workers=1, config=EvalConfig(timing_trials=50)) as pool:
        for backend, expect in expected.items():
            candidate = Candidate.from_file(example_path(f"scale_bias_relu_{backend}.py"), backend=backend)
            result = pool.evaluate(task, candidate)
            t = result.timing
            timing = (
                f"candidate {t.candidate_ms:.4f} ms, reference {t.reference_ms:.4f} ms, speedup {t.speedup:.2f}x ({t.method})"
                if t and t.candidate_ms is not None else "not timed"
            )
            print(f"{backend:7} {result.status!s:9} on {result.device:7} {timing}")
            if result.error:
                print("        " + result.error.replace("\n", "\n        "))
            failures += str(result.status) != expect
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
