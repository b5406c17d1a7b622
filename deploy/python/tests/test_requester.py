"""Who asked: requested_by on start, by/by_name on stop, and the hub hook that carries a stop's requester."""

import types
import unittest

from jupyterhub import orm
from jupyterhub.handlers.base import BaseHandler
from support import SpawnerTestCase

from dsmlp_spawner import requester

POD = {"pod_name": "jupyter-alice", "namespace": "jhub"}


def hub_user(name, admin=False):
    # The hub's User wrapper reads name and admin off its ORM row.
    return types.SimpleNamespace(name=name, admin=admin)


class TestDescribe(unittest.TestCase):
    def test_kinds(self):
        cullers = {"idle-culler"}
        cases = {
            "no request": (None, {"kind": "hub"}),
            "the owner": (hub_user("alice"), {"kind": "user", "name": "alice"}),
            "another user": (hub_user("bob", admin=True), {"kind": "admin", "name": "bob"}),
            "the culler": (orm.Service(name="idle-culler"), {"kind": "culler", "name": "idle-culler"}),
            "another service": (orm.Service(name="grader"), {"kind": "service", "name": "grader"}),
            "nameless": (types.SimpleNamespace(name=""), {"kind": "hub"}),
        }
        for name, (who, want) in cases.items():
            with self.subTest(name):
                self.assertEqual(requester.describe(who, "alice", cullers), want)


class TestHook(unittest.IsolatedAsyncioTestCase):
    async def test_stop_single_user_carries_the_requester(self):
        # The hub's stop_single_user starts stop() in a task of its own; the
        # requester must be there, and gone after the call.
        seen = []

        async def original(handler, user, server_name=""):
            seen.append(requester.current())

        saved = BaseHandler.stop_single_user
        BaseHandler.stop_single_user = original
        try:
            requester.install()
            requester.install()  # idempotent: wrapped once
            wrapped = BaseHandler.stop_single_user
            self.assertTrue(wrapped._dsmlp_requester)
            self.assertIs(wrapped.__wrapped__, original)
            handler = types.SimpleNamespace(current_user=hub_user("bob", admin=True))
            await wrapped(handler, None, "")
        finally:
            BaseHandler.stop_single_user = saved
        self.assertEqual(seen[0].name, "bob")
        self.assertIsNone(requester.current())


class TestRequestedBy(SpawnerTestCase):
    async def test_start_sends_the_spawn_handler_user(self):
        self.fake.post_reply = (200, {"status": "running", "url": "http://127.0.1.2:8888", "state": {}})
        spawner = self.spawner()
        spawner.handler = types.SimpleNamespace(current_user=hub_user("bob", admin=True))
        await spawner.start()
        self.assertEqual(self.fake.of("POST")[0].json()["requested_by"], {"kind": "admin", "name": "bob"})

    async def test_start_without_a_handler_is_the_hub(self):
        self.fake.post_reply = (200, {"status": "running", "url": "http://127.0.1.2:8888", "state": {}})
        spawner = self.spawner()
        await spawner.start()
        self.assertEqual(self.fake.of("POST")[0].json()["requested_by"], {"kind": "hub"})

    async def test_stop_sends_who_asked(self):
        cases = {
            "the culler": (orm.Service(name="jupyterhub-idle-culler"), {"by": "culler", "by_name": "jupyterhub-idle-culler"}),
            "the user": (hub_user("alice"), {"by": "user", "by_name": "alice"}),
            "the hub": (None, {"by": "hub"}),
        }
        for name, (who, want) in cases.items():
            with self.subTest(name):
                self.fake.requests.clear()
                spawner = self.spawner()
                spawner.load_state(dict(POD))
                token = requester._current.set(who)
                try:
                    await spawner.stop()
                finally:
                    requester._current.reset(token)
                query = self.fake.of("DELETE")[0].query
                self.assertEqual({k: query.get(k) for k in ("by", "by_name") if k in query}, want)


if __name__ == "__main__":
    unittest.main()
