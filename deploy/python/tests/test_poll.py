"""poll() and get_url(): spawnerd's status mapped onto the hub's contract, never raising."""

import unittest

from support import SpawnerTestCase, closed_port_url, model

URL = "http://127.0.1.2:8888"
POD = {"pod_name": "jupyter-alice", "namespace": "jhub"}


class TestPoll(SpawnerTestCase):
    async def test_mapping(self):
        cases = {
            "pending": (POD, (200, model("pending")), None),
            "running": (POD, (200, model("running", url=URL)), None),
            "stopped with exit code": (POD, (200, model("stopped", exit_code=137)), 137),
            "stopped cleanly": (POD, (200, model("stopped", exit_code=0)), 0),
            "stopped without exit code": (POD, (200, model("stopped")), 1),
            "stopped with a non-int exit code": (POD, (200, model("stopped", exit_code=True)), 1),
            "absent, had a pod": (POD, (200, model("absent")), 1),
            # spawnerd never answers 404 here: a misrouted poll keeps the server.
            "404 is not spawnerd's": (POD, (404, {"error": "no such server"}), None),
            "service error": (POD, (500, {"error": "informer not synced"}), None),
            "bad request": (POD, (400, {"error": "bad name"}), None),
            "unknown status": (POD, (200, model("rebooting")), None),
            "answer not JSON": (POD, (200, "not json {"), None),
        }
        for name, (state, reply, want) in cases.items():
            with self.subTest(name):
                self.fake.status_replies = [reply]
                spawner = self.spawner()
                spawner.load_state(dict(state))
                self.assertEqual(await spawner.poll(), want)

    async def test_sends_saved_state_as_hint(self):
        self.fake.status_replies = [(200, model("running", url=URL))]
        spawner = self.spawner()
        spawner.load_state({**POD, "pod_uid": "u-1"})
        self.assertIsNone(await spawner.poll())
        query = self.fake.polled()[0]
        self.assertEqual(query, {"pod_name": "jupyter-alice", "namespace": "jhub", "pod_uid": "u-1"})

    async def test_no_state_asks_nobody(self):
        spawner = self.spawner()
        spawner.load_state({"namespace": "jhub", "pvc_name": "claim-alice"})
        self.assertEqual(await spawner.poll(), 0)
        self.assertEqual(self.fake.requests, [])

    async def test_absent_without_a_pod_in_state(self):
        self.fake.post_reply = (200, model("running", url=URL, state={}))
        spawner = self.spawner()
        await spawner.start()
        self.fake.status_replies = [(200, model("absent", state={}))]
        self.assertEqual(await spawner.poll(), 0)
        self.assertEqual(len(self.fake.polled()), 1)

    async def test_unreachable_service_means_running(self):
        spawner = self.hub.spawner(closed_port_url())
        spawner.load_state(dict(POD))
        self.assertIsNone(await spawner.poll())

    async def test_running_model_updates_state(self):
        self.fake.status_replies = [(200, model("running", url=URL, state={**POD, "pvc_name": "claim-alice"}))]
        spawner = self.spawner()
        spawner.load_state(dict(POD))
        self.assertIsNone(await spawner.poll())
        self.assertEqual(spawner.get_state(), {**POD, "pvc_name": "claim-alice"})


class TestState(SpawnerTestCase):
    async def test_round_trip_and_clear(self):
        spawner = self.spawner()
        saved = {"kubespawner_version": "7.0.0", "pod_name": "jupyter-alice", "namespace": "jhub",
                 "dns_name": "jupyter-alice.jhub.svc", "pvc_name": "claim-alice"}
        spawner.load_state(dict(saved))
        self.assertEqual(spawner.get_state(), saved)
        spawner.api_token = "t"
        spawner.clear_state()
        self.assertEqual(spawner.api_token, "")
        self.assertEqual(spawner.get_state(), {"namespace": "jhub", "pvc_name": "claim-alice"})
        self.assertEqual(await spawner.poll(), 0)


class TestGetURL(SpawnerTestCase):
    async def test_after_hub_restart(self):
        self.fake.status_replies = [(200, model("running", url="http://127.0.1.7:8888"))]
        spawner = self.spawner(server="gpu")
        spawner.load_state(dict(POD))
        self.assertIsNone(await spawner.poll())
        self.assertEqual(await spawner.get_url(), "http://127.0.1.7:8888/user/alice/gpu/")
        fresh = self.spawner(server="gpu")
        fresh.load_state(dict(POD))
        self.assertEqual(await fresh.get_url(), "http://127.0.1.7:8888/user/alice/gpu/")

    async def test_unknown_url_trusts_the_hub(self):
        self.fake.status_replies = [(500, {"error": "down"})]
        spawner = self.spawner()
        spawner.load_state(dict(POD))
        self.assertEqual(await spawner.get_url(), spawner.server.url)


if __name__ == "__main__":
    unittest.main()
