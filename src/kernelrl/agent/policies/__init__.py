"""Policies: who writes the kernels (an HTTP chat endpoint, a local model, a replayed script, or
the scripted NKI author `nki-draft`)."""

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
from kernelrl.agent.policies.nki_draft import NkiDraftPolicy
from kernelrl.agent.policies.openai_chat import OpenAIChatPolicy
from kernelrl.agent.policies.scripted import ScriptedPolicy

__all__ = [
    "POLICIES",
    "Completion",
    "Generation",
    "Generator",
    "LocalPolicy",
    "NkiDraftPolicy",
    "OpenAIChatPolicy",
    "Policy",
    "PolicyError",
    "RequestContext",
    "ScriptedPolicy",
    "ToolCall",
    "TransformersGenerator",
    "make_policy",
]
