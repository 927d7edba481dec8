"""Networks and attention mixers (no Lightning, no gradio imports here)."""

from .attention import (
    AgentAttention,
    ChannelAttention,
    TopKSparseAttention,
    agent_attention,
    topk_channel_attention,
)
from .net import DerainNet, TransformerBlock

__all__ = [
    "AgentAttention",
    "ChannelAttention",
    "DerainNet",
    "TopKSparseAttention",
    "TransformerBlock",
    "agent_attention",
    "topk_channel_attention",
]
