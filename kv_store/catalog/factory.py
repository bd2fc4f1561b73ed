"""The catalog a store is configured with: `--index embedded` or a Redis URL."""
from __future__ import annotations

from kv_store.catalog.base import Catalog
from kv_store.catalog.embedded import EmbeddedCatalog
from kv_store.catalog.redis_catalog import RedisCatalog


def is_embedded(spec: str) -> bool:
    """The index is this store's own, rebuilt from its files (no other store may share them)."""
    return not spec or spec == "embedded"


def make_catalog(spec: str, namespace: str = "bidaw") -> Catalog:
    """`embedded` or `redis://host:port/db`."""
    if is_embedded(spec):
        return EmbeddedCatalog()
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return RedisCatalog(spec, namespace)
    raise ValueError(f"--index: {spec!r} is neither 'embedded' nor a redis:// URL")
