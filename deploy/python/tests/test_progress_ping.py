"""The progress WebSocket pings spawnerd: a silent peer is dropped, a live one is kept."""

import asyncio
import base64
import hashlib
import time
import unittest

from support import SpawnerTestCase

from dsmlp_spawner.client import Client

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class SilentPeer:
    """SilentPeer completes the WebSocket handshake, then never answers again: a hung spawnerd."""

    async def start(self):
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d" % self._server.sockets[0].getsockname()[1]
        self._writers = []

    async def _serve(self, reader, writer):
        self._writers.append(writer)
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        await writer.drain()
        while await reader.read(4096):
            pass  # pings are read and never answered

    async def stop(self):
        for w in self._writers:
            w.close()
        self._server.close()
        await self._server.wait_closed()


class TestProgressPing(SpawnerTestCase):
    async def test_silent_spawnerd_is_dropped(self):
        peer = SilentPeer()
        await peer.start()
        try:
            client = Client(peer.url, lambda user, admin: "t", timeout=0.3, ping_interval=0.2)
            conn = await client.progress("alice", "")
            begin = time.monotonic()
            # Without pings this read would wait forever. Closing takes the
            # ping timeout (0.5 s) plus tornado's 5 s wait for the close
            # handshake; 15 s is a generous bound.
            message = await asyncio.wait_for(conn.read_message(), 15)
            self.assertIsNone(message)
            self.assertLess(time.monotonic() - begin, 15)
        finally:
            await peer.stop()

    async def test_live_spawnerd_is_kept(self):
        # Several ping intervals of a quiet but live stream: pongs keep it open.
        self.fake.ws_script = [1.2, {"progress": 100, "ready": True, "url": "http://127.0.1.2:8888"}]
        client = Client(self.fake.url, self.spawner()._client._token_for, timeout=0.1, ping_interval=0.1)
        conn = await client.progress("alice", "")
        message = await asyncio.wait_for(conn.read_message(), 5)
        self.assertIn('"ready": true', message)
        conn.close()

    def test_spawner_sets_the_ping(self):
        self.assertEqual(self.spawner(progress_ping_interval=7)._client._ping_interval, 7)
        self.assertIsNone(self.spawner(progress_ping_interval=0)._client._ping_interval)

if __name__ == "__main__":
    unittest.main()
