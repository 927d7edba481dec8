"""Networks and attention mixers (no Lightning, no gradio imports here)."""

from .attention import (
    AgentAttention,
    ChannelAttention,
    TopKSparseAttention,
    agent_attention,
    topk_channel_attention,
)
from .net import DerainNet, TransformerBlock
from .record import Recorded, build_network, network_record

__all__ = [
    "AgentAttention",
    "ChannelAttention",
    "DerainNet",
    "Recorded",
    "TopKSparseAttention",
    "TransformerBlock",
    "agent_attention",
    "build_network",
    "network_record",
    "topk_channel_attention",
]
