"""Instruction-level cost model: every NKI instruction is charged to one engine; the result is an
ESTIMATE in microseconds derived from the constants below, never a measured wall time.

Overlap rule: the four compute engines run concurrently, so compute time is the busiest engine's
time; DMA (HBM<->SBUF) is added on top (no overlap of data movement with compute assumed, which
overestimates well-pipelined kernels). estimated_total_us = max(compute engines) + dma.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")

# Documented: a Trainium (trn1) chip has two NeuronCore-v2 and delivers 190 BF16/FP16 TFLOPS and
# 47.5 FP32 TFLOPS, with 820 GB/s of HBM bandwidth (Neuron "Trainium Architecture" page). Per core
# we take half of each.
TENSOR_FLOPS_BF16 = 190e12 / 2
TENSOR_FLOPS_FP32 = 47.5e12 / 2
HBM_BYTES_PER_S = 820e9 / 2
# Documented: the Tensor Engine is a 128x128 systolic array, so a matmul occupies all of it whatever
# its K (partition) and M (stationary free) sizes; time follows the moving free size N.
PE_ROWS = PE_COLS = 128
# ASSUMED (not from a datasheet): Vector/Scalar/GpSimd engines process one element per partition per
# cycle at 1.4 GHz, across all 128 partitions in parallel (GpSimd: same rate, also an assumption).
ENGINE_HZ = 1.4e9
GPSIMD_SLOWDOWN = 1.0
# ASSUMED: fixed cost per instruction (dispatch, semaphores, pipeline fill) of 64 engine cycles.
INSTRUCTION_OVERHEAD_CYCLES = 64
# ASSUMED: fixed cost per DMA transfer (descriptor processing, latency not hidden) of 0.1 us.
DMA_FIXED_US = 0.1


def matmul_us(n_moving: int, fp32: bool) -> float:
    """One nc_matmul with moving free size `n_moving`: full array work at the documented peak rate."""
    flops = 2.0 * PE_ROWS * PE_COLS * n_moving
    rate = TENSOR_FLOPS_FP32 if fp32 else TENSOR_FLOPS_BF16
    return flops / rate * 1e6 + INSTRUCTION_OVERHEAD_CYCLES / ENGINE_HZ * 1e6


def elementwise_us(free_elements: int, engine: str) -> float:
    """One Vector/Scalar/GpSimd instruction over `free_elements` per partition."""
    cycles = INSTRUCTION_OVERHEAD_CYCLES + free_elements * (GPSIMD_SLOWDOWN if engine == "gpsimd" else 1.0)
    return cycles / ENGINE_HZ * 1e6


def dma_us(nbytes: int) -> float:
    """One DMA transfer of `nbytes` between HBM and SBUF."""
    return DMA_FIXED_US + nbytes / HBM_BYTES_PER_S * 1e6


@dataclass
class CostReport:
    """Per-engine instruction counts and estimated busy time of one or more kernel runs."""

    instructions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0))
    busy_us: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0.0))
    dma_bytes: int = 0
    flops: int = 0
    kernels: int = 0
    sdk_simulated: int = 0  # kernel runs in the Neuron SDK's simulator (`nki.sdk`): no cost charged

    def charge(self, engine: str, us: float, nbytes: int = 0, flops: int = 0) -> None:
        self.instructions[engine] += 1
        self.busy_us[engine] += us
        self.dma_bytes += nbytes
        self.flops += flops

    def merge(self, other: CostReport) -> None:
        for engine in ENGINES:
            self.instructions[engine] += other.instructions[engine]
            self.busy_us[engine] += other.busy_us[engine]
        self.dma_bytes += other.dma_bytes
        self.flops += other.flops
        self.kernels += other.kernels
        self.sdk_simulated += other.sdk_simulated

    @property
    def compute_us(self) -> float:
        return max(self.busy_us[e] for e in ENGINES if e != "dma")

    @property
    def estimated_total_us(self) -> float:
        return self.compute_us + self.busy_us["dma"]

    @property
    def bottleneck(self) -> str:
        return max(ENGINES, key=lambda e: self.busy_us[e])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "estimated",
            "estimated_total_us": self.estimated_total_us,
            "estimated_busy_us": dict(self.busy_us),
            "instructions": dict(self.instructions),
            "dma_bytes": self.dma_bytes,
            "flops": self.flops,
            "kernels": self.kernels,
            "sdk_simulated": self.sdk_simulated,
            "bottleneck": self.bottleneck,
        }

    def summary(self) -> str:
        parts = ", ".join(f"{e} {self.busy_us[e]:.3f} us/{self.instructions[e]} instr" for e in ENGINES)
        return (
            f"estimated (instruction cost model, not wall time): total {self.estimated_total_us:.3f} us "
            f"= max(compute engines) + dma; {parts}; bottleneck {self.bottleneck}"
        )
