"""The wire's KV tiers by the names people read (JSON usage, reports, the chat client)."""
from __future__ import annotations

from services.runtime.gen import common_pb2

TIER_NAMES = {common_pb2.TIER_NONE: "none", common_pb2.TIER_DRAM: "dram",
              common_pb2.TIER_SSD: "ssd", common_pb2.TIER_LOADING: "loading",
              common_pb2.TIER_UNSPECIFIED: "none"}
