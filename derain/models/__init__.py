"""Networks and attention mixers (no Lightning, no gradio imports here)."""

from .attention import (
    AgentAttention,
    ChannelAttention,
    TopKSparseAttention,
    agent_attention,
    topk_channel_attention,
)
from .grow import add_full_res, deepen, grow, widen
from .net import DerainNet, TransformerBlock
from .record import Recorded, build_network, network_record

__all__ = [
    "AgentAttention",
    "ChannelAttention",
    "DerainNet",
    "Recorded",
    "TopKSparseAttention",
    "TransformerBlock",
    "add_full_res",
    "agent_attention",
    "build_network",
    "deepen",
    "grow",
    "network_record",
    "topk_channel_attention",
    "widen",
]
