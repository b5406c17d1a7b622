"""A 404 or a non-spawnerd answer is a misrouting (wrong service_url, an ingress), never "the server is gone"."""

import unittest

from support import SpawnerTestCase, model

from dsmlp_spawner.client import MisroutedError

POD = {"pod_name": "jupyter-alice", "namespace": "jhub"}


class TestMisrouting(SpawnerTestCase):
    async def test_poll_keeps_the_server_and_logs_an_error(self):
        cases = {
            "404 with spawnerd's error shape": (404, {"error": "no such server"}),
            "404 from something else": (404, "<html>Not Found</html>"),
            "200 that is not a server model": (200, {"routes": {}}),
        }
        for name, reply in cases.items():
            with self.subTest(name):
                self.fake.status_replies = [reply]
                spawner = self.spawner()
                spawner.load_state(dict(POD))
                with self.assertLogs(spawner.log, "ERROR") as logs:
                    self.assertIsNone(await spawner.poll())
                self.assertIn("misrouted", "\n".join(logs.output))
                self.assertIn("check service_url", "\n".join(logs.output))

    async def test_stop_stays_pending_then_raises(self):
        self.fake.delete_replies = [404]
        spawner = self.spawner(stop_timeout=0.5)
        spawner.load_state(dict(POD))
        with self.assertLogs(spawner.log, "ERROR") as logs:
            with self.assertRaises(MisroutedError) as ctx:
                await spawner.stop()
        self.assertEqual(ctx.exception.status, 404)
        # Retried until stop_timeout (the pod's fate is unknown), logged once
        # at the start and once at the end.
        self.assertGreater(len(self.fake.of("DELETE")), 2)
        self.assertEqual(len(logs.output), 2)
        self.assertIn("stop misrouted", logs.output[0])
        # What the hub would show names no internals.
        self.assertNotIn("404", ctx.exception.jupyterhub_message)

    async def test_stop_after_a_misrouted_answer_recovers(self):
        # An ingress that routes again (e.g. after a reload) ends the stop normally.
        self.fake.delete_replies = [404, 404, 204]
        spawner = self.spawner()
        spawner.load_state(dict(POD))
        await spawner.stop()
        self.assertEqual(len(self.fake.of("DELETE")), 3)

    async def test_stop_waiting_on_a_misrouted_status_does_not_report_success(self):
        self.fake.delete_replies = [202]
        self.fake.status_replies = [(404, {"error": "not found"})]
        spawner = self.spawner(stop_timeout=0.3)
        spawner.load_state(dict(POD))
        with self.assertRaises(TimeoutError):
            await spawner.stop()

    async def test_start_fails_instead_of_polling_forever(self):
        self.fake.post_reply = (202, model("pending"))
        self.fake.ws_status = 404
        self.fake.status_replies = [(404, {"error": "not found"})]
        spawner = self.spawner()
        with self.assertRaises(MisroutedError):
            await spawner.start()
        polls = [r for r in self.fake.of("GET") if not r.path.endswith("/progress")]
        self.assertEqual(len(polls), 1)

    async def test_absent_still_means_gone(self):
        # The genuine "unknown server" answer is still an exit, as before.
        self.fake.status_replies = [(200, model("absent"))]
        spawner = self.spawner()
        spawner.load_state(dict(POD))
        self.assertEqual(await spawner.poll(), 1)


if __name__ == "__main__":
    unittest.main()
