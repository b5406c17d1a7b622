"""spawnerd's calls go through a client of their own, sized by http_max_clients, not the hub's shared one.

More requests than slots wait their turn without the wait counting against request_timeout.
"""

import asyncio
import time
import unittest

from tornado.httpclient import AsyncHTTPClient

from support import SpawnerTestCase, decode, model  # first: it puts dsmlp_spawner on the path
from dsmlp_spawner.client import Gate, TransportError, shared_gate, shared_http_client  # noqa: E402

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

    def test_queue_timeout_refused_unless_positive(self):
        with self.assertRaises(ValueError) as ctx:
            self.spawner(http_queue_timeout=0)
        self.assertIn("http_queue_timeout", str(ctx.exception))

    async def test_burst_beyond_the_slots_waits_its_turn(self):
        # 8 starts on 2 slots, each answered in 0.4 s: the last ones wait 1.2 s for a slot,
        # beyond request_timeout (1 s), and must still succeed (tornado's own queue would
        # have failed them as "Timeout in request queue").
        self.fake.post_delay = 0.4
        client = self.spawner(http_max_clients=2, request_timeout=1)._client
        sent = time.monotonic()
        models = await asyncio.gather(*(client.start(f"user{i}", "", {}) for i in range(8)))
        took = time.monotonic() - sent
        self.assertEqual([m["status"] for m in models], ["pending"] * 8)
        self.assertEqual(self.fake.post_peak, 2, "more requests in flight than http_max_clients")
        self.assertGreater(took, 1.5, "the burst did not queue: the test proves nothing")
        self.assertEqual(shared_gate(2).busy(), (0, 0))
        # Each token is minted when its request is sent, not when it began to wait.
        issued = [decode(r.token)["iat"] for r in self.fake.of("POST")]
        self.assertGreaterEqual(max(issued) - min(issued), 1)

    async def test_queue_timeout_fails_with_what_holds_the_slots(self):
        self.fake.post_delay = 1.5
        client = self.spawner(http_max_clients=1, request_timeout=3, http_queue_timeout=0.3)._client
        first = asyncio.ensure_future(client.start("alice", "", {}))
        await asyncio.sleep(0.1)
        with self.assertRaises(TransportError) as ctx:
            await client.start("bob", "", {})
        message = str(ctx.exception)
        self.assertIn("http_max_clients", message)
        self.assertIn("1 in flight", message)
        self.assertEqual((await first)["status"], "pending")
        # The request that gave up holds no slot: the next one is sent at once.
        self.fake.post_delay = 0
        self.assertEqual((await client.start("bob", "", {}))["status"], "pending")
        self.assertEqual([r.path.split("/")[4] for r in self.fake.of("POST")], ["alice", "bob"])


class TestGate(unittest.IsolatedAsyncioTestCase):
    async def test_fifo_and_cancelled_waiters_keep_no_slot(self):
        gate = Gate(1)
        await gate.acquire(None)
        order = []

        async def take(name):
            await gate.acquire(None)
            order.append(name)
            gate.release()

        a, b, c = (asyncio.ensure_future(take(n)) for n in "abc")
        await asyncio.sleep(0)
        self.assertEqual(gate.busy(), (1, 3))
        b.cancel()
        await asyncio.sleep(0)
        gate.release()
        await asyncio.gather(a, c)
        with self.assertRaises(asyncio.CancelledError):
            await b
        self.assertEqual(order, ["a", "c"])
        self.assertEqual(gate.busy(), (0, 0))

    async def test_slot_handed_to_a_waiter_cancelled_at_once_is_passed_on(self):
        gate = Gate(1)
        await gate.acquire(None)
        first = asyncio.ensure_future(gate.acquire(None))
        second = asyncio.ensure_future(gate.acquire(None))
        await asyncio.sleep(0)
        gate.release()  # hands the slot to first's future...
        first.cancel()  # ...and first is cancelled before it resumes
        with self.assertRaises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 1)
        self.assertEqual(gate.busy(), (1, 0))
        gate.release()
        self.assertEqual(gate.busy(), (0, 0))


if __name__ == "__main__":
    unittest.main()
