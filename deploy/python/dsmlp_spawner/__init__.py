"""dsmlp_spawner is the JupyterHub side of spawnerd: a Spawner that forwards to the Go service."""

from .spawner import RemoteKubeSpawner, SpawnFailed

__all__ = ["RemoteKubeSpawner", "SpawnFailed"]
__version__ = "0.1.0"
