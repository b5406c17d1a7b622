"""delete_forever(): the storage DELETE with the saved state, retries and limits, the hub's own call; start sending the saved pvc_name."""

import unittest

from support import SpawnerTestCase, _Base, model

from dsmlp_spawner.client import AuthError, ServiceError

SAVED = {"pod_name": "jupyter-alice--work", "namespace": "jhub", "pvc_name": "claim-alice--work"}


def deletion(result="deleted", pvc="claim-alice--work", reason=""):
    body = {"user": "alice", "server": "work", "pvc": pvc, "namespace": "jhub", "result": result}
    if reason:
        body["reason"] = reason
    return body


class _StorageHandler(_Base):
    def delete(self):
        replies = self.fake.storage_replies
        self.reply(*(replies.pop(0) if len(replies) > 1 else replies[0]))


def add_storage_route(fake):
    """add_storage_route gives the running fake spawnerd the storage route.

    ``fake.storage_replies`` is a list of (status, body) for DELETE …/storage,
    consumed in order; the last repeats.
    """
    fake.storage_replies = [(200, deletion())]
    app = fake._server.request_callback
    # Rules added for a host pattern are matched before the app's own.
    app.add_handlers(
        r".*", [(r"/api/v1/users/[^/]+/(?:server|servers/[^/]+)/storage", _StorageHandler, {"fake": fake})]
    )


class TestDeleteForever(SpawnerTestCase):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        add_storage_route(self.fake)

    def deletes(self):
        return [r for r in self.fake.of("DELETE") if r.path.endswith("/storage")]

    async def test_sends_the_saved_state(self):
        cases = {
            "named server": ("work", SAVED, "/api/v1/users/alice/servers/work/storage",
                             {"pvc_name": "claim-alice--work", "namespace": "jhub"}),
            "default server": ("", {"namespace": "jhub", "pvc_name": "claim-alice"}, "/api/v1/users/alice/server/storage",
                               {"pvc_name": "claim-alice", "namespace": "jhub"}),
            "nothing saved": ("work", {}, "/api/v1/users/alice/servers/work/storage", {}),
        }
        for name, (server, state, path, query) in cases.items():
            with self.subTest(name):
                self.fake.requests.clear()
                spawner = self.spawner(server=server)
                spawner.load_state(dict(state))
                await spawner.delete_forever()
                deletes = self.deletes()
                self.assertEqual(len(deletes), 1)
                self.assertEqual(deletes[0].path, path)
                self.assertEqual(deletes[0].query, {**query, "user_id": str(spawner.user.id)})
                self.assertEqual(deletes[0].body, "")

    async def test_kept_is_not_an_error(self):
        self.fake.storage_replies = [(200, deletion("kept", reason="delete_pvc is false"))]
        spawner = self.spawner(server="work")
        spawner.load_state(dict(SAVED))
        await spawner.delete_forever()
        self.assertEqual(len(self.deletes()), 1)

    async def test_retries(self):
        cases = {
            "a 5xx": [(503, {"error": "blip"}), (200, deletion())],
            "still terminating (409)": [(409, {"error": "stop it first", "field": "server"}), (200, deletion())],
        }
        for name, replies in cases.items():
            with self.subTest(name):
                self.fake.requests.clear()
                self.fake.storage_replies = list(replies)
                spawner = self.spawner(server="work")
                spawner.load_state(dict(SAVED))
                await spawner.delete_forever()
                self.assertEqual(len(self.deletes()), 2)

    async def test_client_error_is_not_retried(self):
        self.fake.storage_replies = [(400, {"error": "bad pvc_name", "field": "pvc_name"})]
        spawner = self.spawner(server="work")
        spawner.load_state(dict(SAVED))
        with self.assertRaises(ServiceError) as ctx:
            await spawner.delete_forever()
        self.assertEqual((ctx.exception.status, ctx.exception.field), (400, "pvc_name"))
        self.assertEqual(len(self.deletes()), 1)

    async def test_retries_are_bounded(self):
        self.fake.storage_replies = [(503, {"error": "down"})]
        spawner = self.spawner(server="work", stop_timeout=0.3)
        spawner.load_state(dict(SAVED))
        with self.assertRaises(ServiceError):
            await spawner.delete_forever()
        self.assertGreater(len(self.deletes()), 1)

    async def test_wrong_secret(self):
        spawner = self.spawner(server="work", secret=b"not-the-shared-secret-at-all")
        spawner.load_state(dict(SAVED))
        with self.assertRaises(AuthError):
            await spawner.delete_forever()

    async def test_the_hub_calls_it_with_the_state_clear_state_kept(self):
        # As the hub deletes a named server: stop, clear_state, then
        # User._delete_spawner, which calls delete_forever and only logs
        # what it raises, so the requests themselves are checked.
        self.fake.delete_replies = [204]
        spawner = self.spawner(server="work")
        spawner.load_state(dict(SAVED))
        await spawner.stop()
        spawner.clear_state()
        spawner.orm_spawner.server = None
        self.assertFalse(spawner.active)
        await spawner.user._delete_spawner(spawner)
        self.assertEqual([r.path for r in self.fake.of("DELETE")],
                         ["/api/v1/users/alice/servers/work", "/api/v1/users/alice/servers/work/storage"])
        deletes = self.deletes()
        self.assertEqual(len(deletes), 1)
        self.assertEqual(deletes[0].query["pvc_name"], "claim-alice--work")
        self.assertEqual(deletes[0].query["namespace"], "jhub")


class TestStartSendsTheSavedPVCName(SpawnerTestCase):
    async def test_state_in_the_start_body(self):
        url = "http://127.0.1.2:8888"
        cases = {
            "saved by spawnerd": ({"pod_name": "jupyter-alice", "namespace": "jhub", "pvc_name": "claim-alice"}, {"pvc_name": "claim-alice"}),
            # KubeSpawner's own state, when it wrote the hub's database.
            "saved by KubeSpawner": ({"kubespawner_version": "7.1.0", "pod_name": "jupyter-alice", "namespace": "jhub",
                                      "dns_name": "jupyter-alice.jhub.svc.cluster.local", "pvc_name": "claim-alice"},
                                     {"pvc_name": "claim-alice"}),
            "nothing saved": ({}, None),
        }
        for name, (state, want) in cases.items():
            with self.subTest(name):
                self.fake.requests.clear()
                self.fake.post_reply = (200, model("running", url=url))
                spawner = self.spawner()
                spawner.load_state(dict(state))
                spawner.clear_state()
                self.assertEqual(await spawner.start(), url)
                body = self.fake.of("POST")[0].json()
                self.assertEqual(body.get("state"), want)


if __name__ == "__main__":
    unittest.main()
