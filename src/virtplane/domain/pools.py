"""Where a storage pool lives on its hosts: its name on the hypervisor and its directory."""

from __future__ import annotations

from virtplane.domain.images import paths_overlap
from virtplane.domain.resources import StoragePool

__all__ = ["DEFAULT_POOL_ROOT", "pool_driver_name", "pool_path", "pools_overlap"]

DEFAULT_POOL_ROOT = "/var/lib/virtplane/pools"


def pool_driver_name(pool: StoragePool) -> str:
    """The pool's name on the hypervisor; local pools with the same one are interchangeable targets."""
    return pool.spec.driver_pool or pool.metadata.name


def pool_path(pool: StoragePool) -> str:
    return pool.spec.path or f"{DEFAULT_POOL_ROOT}/{pool_driver_name(pool)}"


def pools_overlap(a: StoragePool, b: StoragePool) -> bool:
    """The two pools share a hypervisor pool or a directory (an image library and a volume pool
    never may: deleting a volume must never reach the library)."""
    return pool_driver_name(a) == pool_driver_name(b) or paths_overlap(pool_path(a), pool_path(b))
