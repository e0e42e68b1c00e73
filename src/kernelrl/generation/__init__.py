"""Sampling engine for RL: batched sampling with a KV cache, continuous batching, per-token
log-probs and policy versions, a remote OpenAI-compatible client, and CoPRIS partial rollouts.

This layer knows nothing about kernels; it imports torch and transformers only.
"""

from kernelrl.generation.copris import CoprisScheduler, PromptGroup, RolloutGroups, RolloutStats, expand_group
from kernelrl.generation.engine import Engine, EngineStats
from kernelrl.generation.fidelity import LogprobGap, logprob_gap, teacher_forced_logprobs
from kernelrl.generation.interfaces import Generator, StepGenerator
from kernelrl.generation.records import FinishReason, GenerationRequest, GenerationResult, SamplingParams
from kernelrl.generation.remote import OpenAICompletionsClient, RemoteGenerationError
from kernelrl.generation.sampling import process_logits

__all__ = [
    "CoprisScheduler",
    "Engine",
    "EngineStats",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "Generator",
    "LogprobGap",
    "OpenAICompletionsClient",
    "PromptGroup",
    "RemoteGenerationError",
    "RolloutGroups",
    "RolloutStats",
    "SamplingParams",
    "StepGenerator",
    "expand_group",
    "logprob_gap",
    "process_logits",
    "teacher_forced_logprobs",
]
