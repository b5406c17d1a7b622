"""The hub's progress page: spawnerd's plain sentence is the headline, the Kubernetes text stays in the event log."""

import asyncio
import unittest

from support import SpawnerTestCase, model

from dsmlp_spawner.events import EventLog, raw_line

URL = "http://127.0.1.2:8888"

TAINT = (
    "0/8 nodes are available: 3 node(s) had untolerated taint(s), 5 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling."
)
DENIED = (
    "On-demand GPU lease for 1 x a5000 was denied by the reservation service: Only 0 GPU(s) of class a5000 "
    "are free for on-demand use. The pod stays Pending; the controller will keep retrying."
)


def k8s(message, raw_message, reason="FailedScheduling", typ="Warning", progress=30):
    return {
        "progress": progress,
        "message": message,
        "raw_event": {"reason": reason, "type": typ, "message": raw_message, "lastTimestamp": "2026-12-03T16:40:05Z"},
    }


class TestRawLine(unittest.TestCase):
    def test_translated_event_lists_its_raw_text(self):
        ev = k8s("No node matches this server's node selection.", TAINT)
        self.assertEqual(raw_line(ev), {"progress": 30, "message": "2026-12-03T16:40:05Z [Warning] " + TAINT})

    def test_message_that_already_holds_the_raw_text(self):
        # The engine's sentence is the headline verbatim (with more after it).
        ev = k8s(DENIED + " A GPU of class a5000 could be free from 2026-12-03 09:30:00 PST.", DENIED, reason="OnDemandLeaseDenied")
        self.assertIsNone(raw_line(ev))

    def test_events_without_raw_text(self):
        self.assertIsNone(raw_line({"message": "Server launch is taking longer than expected."}))
        self.assertIsNone(raw_line({"progress": 30, "message": "x", "raw_event": {"reason": "Scheduled"}}))
        self.assertIsNone(raw_line({"message": "x", "raw_event": "not a dict"}))

    def test_missing_time_and_type(self):
        ev = {"message": "plain", "raw_event": {"message": "raw"}}
        self.assertEqual(raw_line(ev), {"message": "raw"})


class TestEventLogOrder(unittest.IsolatedAsyncioTestCase):
    async def test_headline_comes_after_the_raw_line(self):
        log = EventLog()
        held = DENIED + " The spawn waits until 09:20:05 PST."
        log.append(k8s(held, DENIED, reason="OnDemandLeaseDenied"))
        # The scheduler's taint verdict repeats the engine's reason.
        log.append(k8s(held, TAINT, progress=50))
        log.close()
        got = [e async for e in log.follow()]
        self.assertEqual([e["message"] for e in got], [held, "2026-12-03T16:40:05Z [Warning] " + TAINT, held])
        self.assertEqual([e.get("progress") for e in got], [30, 50, 50])


class TestHubSeesHeadlineLast(SpawnerTestCase):
    async def test_relay_keeps_the_headline_and_lists_raw_text(self):
        headline = "No node has 1 free nvidia.com/gpu (needed: 1 GPU, 2 CPU), so the server waits for one to free up."
        raw = "0/8 nodes are available: 2 Insufficient nvidia.com/gpu, 6 node(s) didn't match Pod's node affinity/selector."
        self.fake.ws_script = [
            k8s(headline, raw),
            {"ready": True, "progress": 100, "url": URL, "message": "Server ready at " + URL},
        ]
        self.fake.status_replies = [(200, model("running", url=URL))]
        spawner = self.spawner()
        spawner.clear_state()
        self.assertEqual(await spawner.start(), URL)
        got = [e async for e in spawner.progress()]
        messages = [e["message"] for e in got]
        self.assertEqual(messages, ["2026-12-03T16:40:05Z [Warning] " + raw, headline, "Server ready at " + URL])
        # The headline event itself still carries raw_event, as KubeSpawner's do.
        self.assertEqual(got[1]["raw_event"]["message"], raw)


if __name__ == "__main__":
    unittest.main()
