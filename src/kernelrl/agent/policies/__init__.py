"""Policies: who writes the kernels (an HTTP chat endpoint, a local model, or a replayed script)."""

from kernelrl.agent.policies.base import (
    POLICIES,
    Completion,
    Policy,
    PolicyError,
    RequestContext,
    ToolCall,
    make_policy,
)
from kernelrl.agent.policies.local import Generation, Generator, LocalPolicy, TransformersGenerator
from kernelrl.agent.policies.openai_chat import OpenAIChatPolicy
from kernelrl.agent.policies.scripted import ScriptedPolicy

__all__ = [
    "POLICIES",
    "Completion",
    "Generation",
    "Generator",
    "LocalPolicy",
    "OpenAIChatPolicy",
    "Policy",
    "PolicyError",
    "RequestContext",
    "ScriptedPolicy",
    "ToolCall",
    "TransformersGenerator",
    "make_policy",
]
