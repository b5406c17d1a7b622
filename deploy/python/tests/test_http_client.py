"""spawnerd's calls go through a client of their own, sized by http_max_clients, not the hub's shared one."""

import unittest

from tornado.httpclient import AsyncHTTPClient

from dsmlp_spawner.client import shared_http_client
from support import SpawnerTestCase, model

POD = {"pod_name": "jupyter-alice", "namespace": "jhub"}


class TestHTTPClient(SpawnerTestCase):
    async def test_own_client_sized_by_the_trait(self):
        spawner = self.spawner(http_max_clients=7)
        self.fake.status_replies = [(200, model("running", url="http://127.0.1.2:8888"))]
        spawner.load_state(dict(POD))
        self.assertIsNone(await spawner.poll())
        own = shared_http_client(7)
        self.assertIsNot(own, AsyncHTTPClient(), "spawnerd's calls share the hub's client")
        self.assertEqual(own.max_clients, 7)
        # Every spawner of the hub shares it: one queue, not one per user.
        self.assertIs(shared_http_client(7), own)
        self.assertEqual(len(self.fake.polled()), 1)

    def test_refused_below_one(self):
        with self.assertRaises(ValueError) as ctx:
            self.spawner(http_max_clients=0)
        self.assertIn("http_max_clients", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
