"""progress(): every subscriber replays the spawn's events from the first one and sees the last."""

import asyncio
import unittest

from support import SpawnerTestCase, model

from dsmlp_spawner.events import EventLog

URL = "http://127.0.1.2:8888"


class TestEventLog(unittest.IsolatedAsyncioTestCase):
    async def test_replay_to_early_and_late_subscribers(self):
        log = EventLog()
        early = asyncio.ensure_future(self._collect(log, pop="ready"))
        await asyncio.sleep(0)
        log.append({"progress": 10, "message": "a"})
        await asyncio.sleep(0)
        middle = asyncio.ensure_future(self._collect(log))
        log.append({"progress": 100, "ready": True, "message": "b"})
        log.close()  # at once, as start() does: the last event must not be lost
        late = await self._collect(log)
        want = [{"progress": 10, "message": "a"}, {"progress": 100, "ready": True, "message": "b"}]
        # The early reader popped "ready" from its copies, as the hub does.
        self.assertEqual(await early, [want[0], {"progress": 100, "message": "b"}])
        self.assertEqual(await middle, want)
        self.assertEqual(late, want)

    async def _collect(self, log, pop=None):
        got = []
        async for event in log.follow():
            if pop:
                event.pop(pop, None)
            got.append(event)
        return got


class TestProgress(SpawnerTestCase):
    async def test_two_subscribers_and_a_late_one(self):
        events = [
            {"progress": 10, "message": "Scheduled", "raw_event": {"reason": "Scheduled"}},
            {"progress": 40, "message": "Pulling", "raw_event": {"reason": "Pulling"}},
            {"progress": 70, "message": "Started", "raw_event": {"reason": "Started"}},
            {"ready": True, "progress": 100, "url": URL, "message": "Server ready"},
        ]
        self.fake.ws_script = [events[0], 0.05, events[1], 0.05, events[2], events[3]]
        self.fake.status_replies = [(200, model("running", url=URL))]
        spawner = self.spawner()
        spawner.clear_state()  # the hub does this before every spawn
        seen = []
        first = asyncio.ensure_future(self._collect(spawner, seen))  # subscribed before start()
        start = asyncio.ensure_future(spawner.start())
        await self._until(lambda: len(seen) >= 1)
        second = asyncio.ensure_future(self._collect(spawner))  # subscribed mid-spawn
        self.assertEqual(await start, URL)
        got_first, got_second = await asyncio.wait_for(asyncio.gather(first, second), 5)
        self.assertEqual(got_first, events)
        self.assertEqual(got_second, events)
        self.assertEqual(await self._collect(spawner), events)  # after the spawn ended

    async def test_next_spawn_starts_a_new_log(self):
        earlier = [{"message": "earlier"}, {"ready": True, "url": URL}]
        self.fake.ws_script = earlier
        spawner = self.spawner()
        await spawner.start()
        self.assertEqual(await self._collect(spawner), earlier)
        await spawner.stop()
        spawner.clear_state()  # as the hub does after a stop and before a spawn
        self.fake.post_reply = (200, model("running", url=URL))
        waiting = asyncio.ensure_future(self._collect(spawner))
        await asyncio.sleep(0.05)
        self.assertFalse(waiting.done())  # waits for this spawn, shows nothing stale
        await spawner.start()
        self.assertEqual(await asyncio.wait_for(waiting, 5), [])

    async def _collect(self, spawner, into=None):
        got = [] if into is None else into
        async for event in spawner.progress():
            got.append(event)
        return got

    async def _until(self, cond):
        for _ in range(500):
            if cond():
                return
            await asyncio.sleep(0.01)
        self.fail("condition not reached")


if __name__ == "__main__":
    unittest.main()
