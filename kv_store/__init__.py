"""The KV store: DRAM and SSD tiers, the index, eviction policies and the KV store service."""
