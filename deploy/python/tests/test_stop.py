"""stop(): DELETE with now=, the accepted codes, waiting out a 202, retries and limits."""

import unittest

from support import SpawnerTestCase, model

from dsmlp_spawner.client import ServiceError

POD = {"pod_name": "jupyter-alice", "namespace": "jhub"}


class TestStop(SpawnerTestCase):
    async def test_codes(self):
        cases = {
            "gone": ([204], False, "false", 0),
            "immediate": ([204], True, "true", 0),
            "retried after a 5xx": ([503, 204], False, "false", 0),
        }
        for name, (replies, now, query, gets) in cases.items():
            with self.subTest(name):
                self.fake.requests.clear()
                self.fake.delete_replies = list(replies)
                spawner = self.spawner()
                spawner.load_state(dict(POD))
                await spawner.stop(now=now)
                deletes = self.fake.of("DELETE")
                self.assertEqual(len(deletes), len(replies))
                self.assertEqual({d.query["now"] for d in deletes}, {query})
                self.assertEqual(deletes[0].path, "/api/v1/users/alice/server")
                self.assertEqual(len(self.fake.of("GET")), gets)

    async def test_sends_saved_state_as_hint(self):
        # spawnerd finds a pod made before identity labels by the saved state.
        self.fake.delete_replies = [204]
        spawner = self.spawner()
        spawner.load_state({**POD, "pod_uid": "u-1", "pvc_name": "claim-alice"})
        await spawner.stop()
        query = self.fake.of("DELETE")[0].query
        self.assertEqual(
            {k: query.get(k) for k in ("pod_name", "namespace", "pod_uid", "pvc_name")},
            {"pod_name": "jupyter-alice", "namespace": "jhub", "pod_uid": "u-1", "pvc_name": None},
        )

    async def test_202_waits_until_stopped(self):
        self.fake.delete_replies = [202]
        self.fake.status_replies = [
            (200, model("pending", message="Terminating")),
            (500, {"error": "blip"}),
            (200, model("running")),
            (200, model("stopped", exit_code=0)),
        ]
        spawner = self.spawner(server="gpu")
        spawner.load_state(dict(POD))
        await spawner.stop()
        self.assertEqual(len(self.fake.of("GET")), 4)

    async def test_202_ends_when_absent(self):
        self.fake.delete_replies = [202]
        for reply in ((200, model("absent")),):
            with self.subTest(reply=reply[0]):
                self.fake.status_replies = [(200, model("pending")), reply]
                spawner = self.spawner()
                await spawner.stop()

    async def test_202_is_bounded(self):
        self.fake.delete_replies = [202]
        self.fake.status_replies = [(200, model("pending"))]
        spawner = self.spawner(stop_timeout=0.3)
        with self.assertRaises(TimeoutError) as ctx:
            await spawner.stop()
        self.assertIn("did not stop alice", str(ctx.exception))

    async def test_client_error_is_not_retried(self):
        self.fake.delete_replies = [400]
        spawner = self.spawner()
        with self.assertRaises(ServiceError) as ctx:
            await spawner.stop()
        self.assertEqual(ctx.exception.status, 400)
        self.assertEqual(len(self.fake.of("DELETE")), 1)


if __name__ == "__main__":
    unittest.main()
