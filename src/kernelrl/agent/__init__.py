"""The agent loop: the episode protocol (prompts, code extraction, feedback, tool-call syntax), single- and
multi-turn episodes, tools, policies.

It evaluates through `kernelrl.evaluate` and never computes gradients.
"""

from kernelrl.agent.episode import EpisodeConfig, default_reward, episode_protocol, run_episode
from kernelrl.agent.episode_protocol import AgentProtocol, EpisodeProtocol
from kernelrl.agent.extract import extract_code
from kernelrl.agent.feedback import compact_result, format_feedback, truncate_to_tokens
from kernelrl.agent.policies import (
    POLICIES,
    Completion,
    Generator,
    LocalPolicy,
    OpenAIChatPolicy,
    Policy,
    PolicyError,
    RequestContext,
    ScriptedPolicy,
    TransformersGenerator,
    make_policy,
)
from kernelrl.agent.prompts import PromptConfig, initial_messages, task_prompt
from kernelrl.agent.records import Trajectory, Turn, Usage
from kernelrl.agent.tools import TOOL_SCHEMAS, ToolExecutor

__all__ = [
    "POLICIES",
    "TOOL_SCHEMAS",
    "AgentProtocol",
    "Completion",
    "EpisodeConfig",
    "EpisodeProtocol",
    "Generator",
    "LocalPolicy",
    "OpenAIChatPolicy",
    "Policy",
    "PolicyError",
    "PromptConfig",
    "RequestContext",
    "ScriptedPolicy",
    "ToolExecutor",
    "Trajectory",
    "TransformersGenerator",
    "Turn",
    "Usage",
    "compact_result",
    "default_reward",
    "episode_protocol",
    "extract_code",
    "format_feedback",
    "initial_messages",
    "make_policy",
    "run_episode",
    "task_prompt",
    "truncate_to_tokens",
]
