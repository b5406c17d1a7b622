"""start(): the POST body, following progress, falling back to polling, failures, cancellation."""

import asyncio
import unittest

import jupyterhub

from support import SpawnerTestCase, model

from dsmlp_spawner import SpawnFailed
from dsmlp_spawner.client import AuthError, ServiceError

URL = "http://127.0.1.2:8888"

EVENTS = [
    {"progress": 10, "message": "Scheduled on node-1", "raw_event": {"reason": "Scheduled"}},
    {"progress": 50, "message": "Pulling image", "raw_event": {"reason": "Pulling"}},
    {"ready": True, "progress": 100, "url": URL, "message": "Server ready"},
]


class TestStart(SpawnerTestCase):
    async def test_events_then_ready_url(self):
        self.fake.ws_script = EVENTS
        final = model("running", url=URL, state={"pod_name": "jupyter-alice", "namespace": "jhub", "pvc_name": "claim-alice"})
        self.fake.status_replies = [(200, final)]
        spawner = self.spawner()
        spawner.api_token = "hub-minted-token"
        spawner.user_options = {"profile": "gpu", "image": "scipy"}
        spawner.start_timeout = 300

        self.assertEqual(await spawner.start(), URL)

        self.assertEqual([e async for e in spawner.progress()], EVENTS)
        body = self.fake.of("POST")[0].json()
        self.assertEqual(body["user_options"], {"profile": "gpu", "image": "scipy"})
        self.assertEqual(body["api_token"], "hub-minted-token")
        self.assertEqual(body["user_id"], spawner.user.id)
        self.assertEqual(body["hub_version"], jupyterhub.__version__)
        self.assertEqual(body["start_timeout"], 300)
        env = body["env"]
        self.assertEqual(env["JUPYTERHUB_API_TOKEN"], "hub-minted-token")
        self.assertEqual(env["JUPYTERHUB_USER"], "alice")
        self.assertEqual(env["JUPYTERHUB_SERVICE_PREFIX"], "/user/alice/")
        self.assertEqual(env["JUPYTERHUB_SERVICE_URL"], "http://0.0.0.0:8888/user/alice/")
        self.assertNotIn("PATH", env)  # env_keep = []
        self.assertEqual(
            spawner.get_state(),
            {"pod_name": "jupyter-alice", "namespace": "jhub", "pvc_name": "claim-alice"},
        )
        self.assertEqual(await spawner.get_url(), URL + "/user/alice/")
        ws = [r for r in self.fake.of("GET") if r.path.endswith("/progress")]
        self.assertEqual([r.path for r in ws], ["/api/v1/users/alice/server/progress"])

    async def test_failed_event_raises_with_message(self):
        self.fake.ws_script = [EVENTS[0], {"failed": True, "message": "0/3 nodes have a free GPU"}]
        spawner = self.spawner(server="gpu")
        with self.assertRaises(SpawnFailed) as ctx:
            await spawner.start()
        self.assertEqual(ctx.exception.jupyterhub_message, "0/3 nodes have a free GPU")
        got = [e async for e in spawner.progress()]
        self.assertEqual(got, [EVENTS[0], {"failed": True, "message": "0/3 nodes have a free GPU"}])
        self.assertEqual(self.fake.of("POST")[0].path, "/api/v1/users/alice/servers/gpu")

    async def test_socket_drop_falls_back_to_polling(self):
        self.fake.ws_script = [EVENTS[0]]  # then the server closes without a verdict
        self.fake.status_replies = [
            (200, model("pending", message="Pulling image")),
            (200, model("pending", message="Pulling image")),
            (200, model("pending", message="Starting container")),
            (200, model("running", url=URL, message="Running")),
        ]
        spawner = self.spawner()
        self.assertEqual(await spawner.start(), URL)
        got = [e async for e in spawner.progress()]
        self.assertEqual(
            got,
            [EVENTS[0], {"message": "Pulling image"}, {"message": "Starting container"}, {"message": "Running"}],
        )
        status_gets = [r for r in self.fake.of("GET") if not r.path.endswith("/progress")]
        self.assertGreaterEqual(len(status_gets), 4)

    async def test_fallback_sees_server_stop(self):
        self.fake.ws_script = []
        self.fake.status_replies = [(200, model("stopped", exit_code=1, message="Image pull failed"))]
        spawner = self.spawner()
        with self.assertRaises(SpawnFailed) as ctx:
            await spawner.start()
        self.assertEqual(ctx.exception.jupyterhub_message, "Image pull failed")

    async def test_refused_stream_falls_back_but_401_does_not(self):
        self.fake.status_replies = [(200, model("running", url=URL))]
        for status, want in ((404, URL), (500, URL), (401, AuthError)):
            with self.subTest(status=status):
                self.fake.ws_status = status
                spawner = self.spawner()
                if want is AuthError:
                    with self.assertRaises(AuthError):
                        await spawner.start()
                else:
                    self.assertEqual(await spawner.start(), want)

    async def test_already_running_returns_at_once(self):
        self.fake.post_reply = (200, model("running", url=URL))
        spawner = self.spawner()
        self.assertEqual(await spawner.start(), URL)
        self.assertEqual([r.method for r in self.fake.requests], ["POST"])
        self.assertEqual(spawner.get_state()["pod_name"], "jupyter-alice")

    async def test_rejected_options(self):
        self.fake.post_reply = (400, {"error": "unknown profile gpu-xl", "field": "profile"})
        spawner = self.spawner()
        spawner.user_options = {"profile": "gpu-xl"}
        with self.assertRaises(ServiceError) as ctx:
            await spawner.start()
        self.assertEqual(ctx.exception.status, 400)
        self.assertEqual(ctx.exception.field, "profile")
        self.assertEqual(ctx.exception.jupyterhub_message, "unknown profile gpu-xl (field profile)")
        self.assertEqual(await spawner.poll(), 0)

    async def test_server_error_on_start_leaves_poll_asking(self):
        self.fake.post_reply = (503, {"error": "not ready"})
        self.fake.status_replies = [(200, model("pending"))]
        spawner = self.spawner()
        with self.assertRaises(ServiceError):
            await spawner.start()
        # spawnerd may have created the pod before failing: the hub must call stop().
        self.assertIsNone(await spawner.poll())

    async def test_cancel_closes_the_stream(self):
        self.fake.ws_script = [EVENTS[0], "hold"]
        spawner = self.spawner()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(spawner.start(), timeout=0.5)
        await asyncio.wait_for(self.fake.ws_closed.wait(), timeout=5)
        # The log is closed, so progress() ends instead of waiting forever.
        got = await asyncio.wait_for(self._collect(spawner), timeout=5)
        self.assertEqual(got, [EVENTS[0]])

    async def test_stop_cancels_a_start_the_hub_gave_up_on(self):
        # JupyterHub 3.x times out start() without cancelling it, then polls and stops.
        self.fake.ws_script = ["hold"]
        spawner = self.spawner()
        start = asyncio.ensure_future(spawner.start())
        await self._until(lambda: any(r.path.endswith("/progress") for r in self.fake.requests))
        requests_before = len(self.fake.requests)
        self.assertIsNone(await spawner.poll())  # in flight: running, asked of nobody
        self.assertEqual(len(self.fake.requests), requests_before)
        await spawner.stop()
        with self.assertRaises(asyncio.CancelledError):
            await start
        self.assertEqual(len(self.fake.of("DELETE")), 1)
        await asyncio.wait_for(self.fake.ws_closed.wait(), timeout=5)

    async def _collect(self, spawner):
        return [e async for e in spawner.progress()]

    async def _until(self, cond):
        for _ in range(500):
            if cond():
                return
            await asyncio.sleep(0.01)
        self.fail("condition not reached")


if __name__ == "__main__":
    unittest.main()


class TestReservationWait(SpawnerTestCase):
    async def test_pre_spawn_hook_widens_hub_deadline_but_sends_ordinary_timeout(self):
        self.fake.ws_script = EVENTS
        self.fake.status_replies = [(200, model("running", url=URL))]
        hooked = []
        spawner = self.spawner()
        spawner.start_timeout = 90
        spawner.reservation_wait_timeout = 1800
        spawner.pre_spawn_hook = lambda s: hooked.append(s.start_timeout)
        self.fake.profiles = [{"slug": "gpu", "display_name": "GPU", "gpu_class": "a30"}]

        await spawner.run_pre_spawn_hook()
        # The hub reads start_timeout after the hook: it must allow a GPU wait.
        self.assertEqual(spawner.start_timeout, 1800)
        self.assertEqual(hooked, [1800])
        self.assertEqual(await spawner.start(), URL)
        self.assertEqual(self.fake.of("POST")[0].json()["start_timeout"], 90)
        # A second spawn starts again from the ordinary timeout.
        await spawner.run_pre_spawn_hook()
        self.assertEqual(spawner.start_timeout, 1800)

    async def test_zero_wait_keeps_start_timeout(self):
        spawner = self.spawner()
        spawner.start_timeout = 120
        spawner.reservation_wait_timeout = 0
        await spawner.run_pre_spawn_hook()
        self.assertEqual(spawner.start_timeout, 120)
