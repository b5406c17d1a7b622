"""Batched polls: the polls that fall due together go to spawnerd as one POST /api/v1/polls."""

import asyncio
import logging
import unittest

from support import SECRET, SpawnerTestCase, closed_port_url, model

URL = "http://127.0.1.2:8888"


def pod(user):
    return {"pod_name": f"jupyter-{user}", "namespace": "jhub"}


class TestPollBatch(SpawnerTestCase):
    def spawners(self, n, **traits):
        out = []
        for i in range(n):
            spawner = self.spawner(user=f"u{i}", **traits)
            spawner.load_state(pod(f"u{i}"))
            out.append(spawner)
        return out

    async def test_polls_due_together_share_one_request(self):
        # Each server gets its own answer, in order: running, stopped 137, absent.
        self.fake.status_replies = [
            (200, model("running", url=URL)),
            (200, model("stopped", exit_code=137)),
            (200, model("absent")),
        ]
        spawners = self.spawners(3)
        results = await asyncio.gather(*(s.poll() for s in spawners))
        self.assertEqual(results, [None, 137, 1])
        self.assertEqual(self.fake.of("GET"), [])
        self.assertEqual(len(self.fake.batches), 1)
        self.assertEqual(
            self.fake.batches[0],
            [{"user": f"u{i}", "server": "", **pod(f"u{i}")} for i in range(3)],
        )
        self.assertEqual(spawners[0].get_state()["pod_name"], "jupyter-alice")  # from the running model

    async def test_batch_size_caps_a_request(self):
        self.fake.status_replies = [(200, model("running", url=URL))]
        spawners = self.spawners(5, poll_batch_size=2)
        self.assertEqual(await asyncio.gather(*(s.poll() for s in spawners)), [None] * 5)
        self.assertEqual([len(b) for b in self.fake.batches], [2, 2, 1])

    async def test_window_zero_polls_one_by_one(self):
        self.fake.status_replies = [(200, model("running", url=URL))]
        spawners = self.spawners(3, poll_batch_window=0)
        self.assertEqual(await asyncio.gather(*(s.poll() for s in spawners)), [None] * 3)
        self.assertEqual(self.fake.batches, [])
        self.assertEqual(len(self.fake.of("GET")), 3)

    async def test_older_spawnerd_polled_one_by_one(self):
        # A spawnerd without the batched poll answers 404: each poll then goes as a GET,
        # with that GET's own answer, and the next polls skip the batch.
        self.fake.polls_status = 404
        self.fake.status_replies = [(200, model("stopped", exit_code=0))]
        spawners = self.spawners(2)
        self.assertEqual(await asyncio.gather(*(s.poll() for s in spawners)), [0, 0])
        self.assertEqual(len(self.fake.of("GET")), 2)
        self.assertEqual(await spawners[0].poll(), 0)
        self.assertEqual(len(self.fake.of("GET")), 3)
        self.assertEqual(self.fake.batches, [])

    async def test_a_failed_batch_keeps_every_server(self):
        # A batch spawnerd refuses whole (here a 500) fails each poll as its GET
        # would have: the server is kept, not reported dead.
        self.fake.status_replies = [(500, {"error": "informer not synced"})]
        spawners = self.spawners(3)
        with self.assertLogs(spawners[0].log, logging.WARNING) as logs:
            self.assertEqual(await asyncio.gather(*(s.poll() for s in spawners)), [None] * 3)
        self.assertEqual(sum("spawnerd poll failed" in line for line in logs.output), 3)

    async def test_a_misrouted_answer_keeps_the_server(self):
        self.fake.status_replies = [(200, {"no": "status"})]
        (spawner,) = self.spawners(1)
        self.assertIsNone(await spawner.poll())

    async def test_wrong_secret_is_an_auth_error(self):
        spawners = self.spawners(2, secret=SECRET + b"-other")
        with self.assertLogs(spawners[0].log, logging.ERROR) as logs:
            self.assertEqual(await asyncio.gather(*(s.poll() for s in spawners)), [None, None])
        self.assertEqual(sum("spawnerd poll refused" in line for line in logs.output), 2)

    async def test_unreachable_keeps_every_server(self):
        spawners = []
        for i in range(2):
            spawner = self.hub.spawner(closed_port_url(), user=f"u{i}")
            spawner.load_state(pod(f"u{i}"))
            spawners.append(spawner)
        self.assertEqual(await asyncio.gather(*(s.poll() for s in spawners)), [None, None])

    async def test_a_cancelled_poll_is_not_sent(self):
        self.fake.status_replies = [(200, model("running", url=URL))]
        gone, kept = self.spawners(2, poll_batch_window=0.2)
        task = asyncio.ensure_future(gone.poll())
        await asyncio.sleep(0.01)
        task.cancel()
        self.assertIsNone(await kept.poll())
        self.assertEqual(self.fake.batches, [[{"user": "u1", "server": "", **pod("u1")}]])

    def test_traits_checked(self):
        for traits, name in (({"poll_batch_size": 0}, "poll_batch_size"),
                             ({"poll_batch_size": 1001}, "poll_batch_size"),
                             ({"poll_batch_window": -1}, "poll_batch_window")):
            with self.subTest(**traits):
                with self.assertRaises(ValueError) as ctx:
                    self.spawner(**traits)
                self.assertIn(name, str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
