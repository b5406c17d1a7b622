"""Batched polls: the polls of one hub that fall due together go to spawnerd as one request.

The hub polls every server on its own timer (poll_interval, with jitter), and all of them at
once when it starts. Each poll as its own GET costs the hub a request's worth of work (the HTTP
client, a token, JSON) and spawnerd a request's worth of system calls for a lookup in memory.
A PollBatcher holds each poll for up to ``window`` seconds and sends the polls gathered by then
(at most ``size``) as one POST /api/v1/polls; every poll gets its own server's answer, exactly
what its GET would have answered.
"""

import asyncio

from .auth import TokenSigner
from .client import BATCH_SUBJECT, POLLS_PATH, ServiceError, checked_model, hint_fields

# RETRY_BATCH is how long a spawnerd without the batched poll (an older version answering 404)
# is polled one server at a time before the batch is tried again.
RETRY_BATCH = 300.0

# One batcher per event loop and (client, secret, window, size), shared by every spawner of
# the hub; keyed by the loop object, as shared_http_client is.
_batchers = {}


class BatchUnsupported(Exception):
    """BatchUnsupported means spawnerd has no batched poll: poll the server with a GET."""


async def poll_status(client, secret_for, window, size, user, server_name, hint):
    """poll_status returns the server's model, through a batch when ``window`` is above 0.

    ``secret_for()`` returns the shared secret: the batch's token is signed with it (a single
    GET's token comes from the client's own signer).
    """
    if window > 0:
        loop = asyncio.get_running_loop()
        secret = secret_for()
        key = (client.sharing_key(), secret, window, size)
        batchers = _batchers.setdefault(loop, {})
        batcher = batchers.get(key)
        if batcher is None:
            signer = TokenSigner(lambda: secret)
            batcher = batchers[key] = PollBatcher(client.signed_with(signer.read_token), window, size)
        try:
            return await batcher.status(user, server_name, hint)
        except BatchUnsupported:
            pass
    return await client.status(user, server_name, hint)


class PollBatcher:
    """PollBatcher gathers polls for up to ``window`` seconds and sends them as one request."""

    def __init__(self, client, window, size):
        self._client = client
        self._window = window
        self._size = size
        self._pending = []  # (item, future)
        self._timer = None
        self._sending = set()  # tasks in flight, kept from the garbage collector
        self._unsupported_until = None

    async def status(self, user, server_name, hint):
        """status waits for the server's answer in the next batch and returns its model."""
        loop = asyncio.get_running_loop()
        if self._unsupported_until is not None:
            if loop.time() < self._unsupported_until:
                raise BatchUnsupported()
            self._unsupported_until = None
        item = {"user": user, "server": server_name or "", **hint_fields(hint)}
        future = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self._size:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        model = await future
        return checked_model(model, "reading server status", self._client.base_url + POLLS_PATH)

    def _flush(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # A poll cancelled while it waited (the hub gave up on it) is not sent.
        batch = [(item, f) for item, f in self._pending if not f.done()]
        self._pending = []
        if batch:
            task = asyncio.ensure_future(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch):
        try:
            answers = await self._client.poll_many([item for item, _ in batch])
        except ServiceError as err:
            if err.status in (404, 405):
                # An older spawnerd: each poll goes on its own for a while, and gets
                # that GET's own diagnosis if something else answered.
                self._unsupported_until = asyncio.get_running_loop().time() + RETRY_BATCH
                err = BatchUnsupported()
            _fail(batch, err)
            return
        except Exception as err:
            _fail(batch, err)
            return
        except asyncio.CancelledError:
            _fail(batch, asyncio.CancelledError())
            raise
        for (_, future), model in zip(batch, answers):
            if not future.done():
                future.set_result(model)


def _fail(batch, err):
    for _, future in batch:
        if not future.done():
            future.set_exception(err)
