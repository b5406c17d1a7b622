"""NullSpawner: the floor of BenchmarkHubStack, a Spawner that does no work of its own.

The benchmark runs the same hub, with the same configuration, once with
RemoteKubeSpawner and once with this class (HUB_SPAWNER_CLASS=nullspawner.NullSpawner,
this folder on PYTHONPATH). start() returns at once the URL of the benchmark's
shared responder (NULL_SPAWNER_URL), the same URL RemoteKubeSpawner's servers
get, so the hub's http_timeout check and proxy route cost the same in both
runs; poll() says "running" and stop() returns at once. What the hub spends
beyond this class's numbers is the spawner class's own cost.

Calls are counted in the hub's Prometheus registry (/hub/metrics), which is
how the benchmark reads the number of polls without asking the hub for
anything per poll.
"""

import os

from jupyterhub.spawner import Spawner
from prometheus_client import Counter

STARTS = Counter("nullspawner_starts", "NullSpawner.start() calls")
POLLS = Counter("nullspawner_polls", "NullSpawner.poll() calls")


class NullSpawner(Spawner):
    """NullSpawner starts nothing: its servers are the benchmark's responder."""

    async def start(self):
        STARTS.inc()
        return os.environ["NULL_SPAWNER_URL"]

    async def poll(self):
        POLLS.inc()
        # The hub's contract: 0 for a spawner that was never started, None
        # while its server runs (the hub keeps the server record meanwhile).
        return None if self.server is not None else 0

    async def stop(self, now=False):
        return None
