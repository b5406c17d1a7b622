"""Per-spawn progress events, replayed from the start to every subscriber."""

import asyncio


def raw_line(event):
    """raw_line is the hub event that lists a progress event's Kubernetes text.

    spawnerd's message is a plain sentence for the page's headline; the
    Kubernetes event it explains (``raw_event``) would be lost from the
    page's event log, which shows only messages. So the relay puts the raw
    text first, in KubeSpawner's "<time> [<type>] <message>" form, and the
    sentence after it, as the hub shows the newest message as the headline.
    None when there is no raw text or the message already contains it.
    """
    raw = event.get("raw_event")
    if not isinstance(raw, dict):
        return None
    text = raw.get("message")
    if not isinstance(text, str) or not text or text in str(event.get("message", "")):
        return None
    parts = []
    if raw.get("lastTimestamp"):
        parts.append(str(raw["lastTimestamp"]))
    if raw.get("type"):
        parts.append(f"[{raw['type']}]")
    line = {"message": " ".join(parts + [text])}
    if "progress" in event:
        line["progress"] = event["progress"]
    return line


class EventLog:
    """EventLog holds one spawn's progress events.

    ``start()`` appends and finally closes it; each ``progress()`` subscriber
    follows it from index 0. Subscribers wake on an asyncio.Event rather than
    sleep-polling, because the hub stops reading progress the moment the spawn
    finishes and a sleeping reader would lose the last events.
    """

    def __init__(self):
        self._events = []
        self._changed = None
        self.closed = False

    def __len__(self):
        return len(self._events)

    def append(self, event):
        """append records one event and wakes every subscriber.

        An event whose plain-sentence message replaces the Kubernetes event's
        own text is preceded by that text (see ``raw_line``).
        """
        line = raw_line(event)
        if line is not None:
            self._events.append(line)
        self._events.append(event)
        self._wake()

    def close(self):
        """close marks the spawn finished; subscribers end after replaying everything."""
        self.closed = True
        self._wake()

    def _wake(self):
        # Replace the Event instead of clearing it, so a subscriber that has not
        # yet awaited the old one cannot miss this wake-up.
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def follow(self):
        """follow yields every event from the first, then new ones, until closed.

        Each event is a shallow copy: the hub pops keys (``ready``) from what it
        receives, and other subscribers must still see the original.
        """
        i = 0
        while True:
            while i < len(self._events):
                yield dict(self._events[i])
                i += 1
            if self.closed:
                return
            if self._changed is None:
                # Created lazily so it belongs to the running loop.
                self._changed = asyncio.Event()
            await self._changed.wait()
