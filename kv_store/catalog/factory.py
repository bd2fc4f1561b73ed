"""The catalog a store is configured with: `--index embedded` or a Redis URL."""
from __future__ import annotations

from kv_store.catalog.base import Catalog
from kv_store.catalog.embedded import EmbeddedCatalog
from kv_store.catalog.redis_catalog import RedisCatalog


def make_catalog(spec: str, namespace: str = "bidaw") -> Catalog:
    """`embedded` or `redis://host:port/db`."""
    if not spec or spec == "embedded":
        return EmbeddedCatalog()
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return RedisCatalog(spec, namespace)
    raise ValueError(f"--index: {spec!r} is neither 'embedded' nor a redis:// URL")
