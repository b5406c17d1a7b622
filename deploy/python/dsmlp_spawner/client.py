"""HTTP and WebSocket client for spawnerd's hub-facing API (one method per endpoint)."""

import asyncio
import collections
import json
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

API_PREFIX = "/api/v1"

# POLLS_PATH is the batched poll; BATCH_SUBJECT signs its admin token (it
# covers many users' servers).
POLLS_PATH = API_PREFIX + "/polls"
BATCH_SUBJECT = "jupyterhub"

WRONG_SECRET = "wrong shared secret: spawnerd refused the token (401)"

MISROUTED = "The spawner service is misconfigured; please contact the administrators."


class TransportError(RuntimeError):
    """TransportError means spawnerd could not be reached or did not answer in time."""

    jupyterhub_message = "The spawner service is unreachable; please try again later."


class ServiceError(RuntimeError):
    """ServiceError means spawnerd answered with an unexpected HTTP status.

    ``error`` and ``field`` come from spawnerd's ``{"error", "field"}`` body;
    ``jupyterhub_message`` is what the hub shows on the spawn page.
    """

    def __init__(self, action, status, error, field=""):
        self.status = status
        self.error = error
        self.field = field
        where = f" (field {field})" if field else ""
        super().__init__(f"{action}: spawnerd answered {status}: {error}{where}")
        self.jupyterhub_message = f"{error}{where}"


class MisroutedError(ServiceError):
    """MisroutedError means something other than spawnerd answered (e.g. a 404).

    spawnerd never answers 404 on its server routes (an unknown server is
    200 with status "absent"), so a 404 means a wrong service_url or an
    ingress in the way: the server's fate is unknown, not "gone".
    """

    def __init__(self, action, status, error, url):
        super().__init__(action, status, error)
        self.args = (
            f"{action}: {url} answered {status} ({error or 'no spawnerd error body'}): "
            "spawnerd never answers that on this route; check service_url",
        )
        self.jupyterhub_message = MISROUTED


class AuthError(ServiceError):
    """AuthError means spawnerd refused the token: the two sides hold different secrets."""

    def __init__(self, action):
        super().__init__(action, 401, WRONG_SECRET)
        self.args = (WRONG_SECRET,)
        self.jupyterhub_message = WRONG_SECRET


# The saved-state keys sent as a hint with poll and stop.
HINT_KEYS = ("pod_name", "namespace", "pod_uid")


def _hint_query(hint, sep):
    pairs = hint_fields(hint)
    return sep + urlencode(pairs) if pairs else ""


def hint_fields(hint):
    """hint_fields is the saved state sent as the hint with poll and stop."""
    return {k: hint[k] for k in HINT_KEYS if isinstance((hint or {}).get(k), str) and hint[k]}


def checked_model(model, action, url):
    """checked_model returns a poll's answer if it is spawnerd's server model, else raises MisroutedError."""
    if not isinstance(model, dict) or not isinstance(model.get("status"), str):
        raise MisroutedError(action, 200, "answer has no status", url)
    return model


def server_path(user, server_name):
    """server_path is the API path of one server: ``server`` or ``servers/{name}``."""
    path = f"{API_PREFIX}/users/{quote(user, safe='')}/"
    if server_name:
        return path + "servers/" + quote(server_name, safe="")
    return path + "server"


def _error_body(body):
    try:
        data = json.loads(body or b"")
    except ValueError:
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    return str(data.get("error") or ""), str(data.get("field") or "")


def _close_when_connected(connecting):
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result().close()


# One AsyncHTTPClient and one Gate per event loop and size, shared by every spawner of the hub.
# Keyed by the loop object, not its id(): an id can be reused by a later loop once the first is
# freed, which would hand that loop a client bound to the dead one. (A hub has one loop for its
# life.)
_http_clients = {}
_gates = {}


def shared_http_client(max_clients):
    """shared_http_client returns the hub process's client for spawnerd calls.

    It is an instance of its own, not the hub's shared one: that one has tornado's 10 slots and
    carries the hub's calls to the proxy too, so a burst of spawns would queue behind them (and
    time out in the queue) and delay the proxy's routes. It keeps the hub's configuration of
    AsyncHTTPClient (pycurl, TLS defaults).
    """
    clients = _http_clients.setdefault(asyncio.get_running_loop(), {})
    client = clients.get(max_clients)
    if client is None:
        client = AsyncHTTPClient(force_instance=True, max_clients=max_clients)
        clients[max_clients] = client
    return client


def shared_gate(max_clients):
    """shared_gate returns the hub process's Gate of max_clients slots for spawnerd calls."""
    gates = _gates.setdefault(asyncio.get_running_loop(), {})
    gate = gates.get(max_clients)
    if gate is None:
        gate = gates[max_clients] = Gate(max_clients)
    return gate


class Gate:
    """Gate lets at most ``size`` requests to spawnerd be in flight; the rest wait in turn.

    The wait is here rather than in tornado's client queue, which gives a queued request
    min(connect_timeout, request_timeout) in all: under a burst larger than the slots (500
    starts at once, 64 slots) requests failed as "Timeout in request queue" though spawnerd
    answered each in well under request_timeout. Here request_timeout starts once a request
    has its slot, and the wait has a bound of its own (queue_timeout). A FIFO of futures
    rather than asyncio.Semaphore, whose waiters Python 3.11 can lose on cancellation.
    """

    def __init__(self, size):
        self.size = size
        self._free = size
        self._waiters = collections.deque()

    def busy(self):
        """busy returns how many slots are taken and how many requests wait."""
        return self.size - self._free, sum(1 for w in self._waiters if not w.done())

    async def acquire(self, timeout):
        """acquire takes a slot, waiting at most ``timeout`` seconds; it raises TimeoutError."""
        if self._free > 0:  # then no one waits: release() hands a slot on before it frees one
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot as the wait ended: pass it on
            else:
                waiter.cancel()  # release() skips it
            raise

    def release(self):
        """release frees a slot, or hands it to the longest waiter."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class Client:
    """Client calls spawnerd on behalf of one hub user at a time.

    ``token_for(user, admin)`` returns the bearer token for each call; a new
    one is minted per request so none outlives its 60 s lifetime.
    """

    def __init__(
        self,
        base_url,
        token_for,
        timeout,
        http_client=None,
        ping_interval=None,
        read_token_for=None,
        max_clients=64,
        queue_timeout=None,
    ):
        self._base = base_url.rstrip("/")
        self._token_for = token_for
        # Reads (GET) may share a token (spawnerd accepts one again for reads
        # until it expires); writes always mint their own.
        self._read_token_for = read_token_for or token_for
        self._timeout = timeout
        # Progress WebSocket keep-alive: a spawnerd that hangs without closing
        # the socket is noticed within about 2 * ping_interval + timeout
        # seconds, plus tornado's 5 s wait for the close handshake.
        self._ping_interval = ping_interval
        # Tests pass a client; otherwise shared_http_client(max_clients).
        self._http = http_client
        self._max_clients = max_clients
        # How long a request may wait for one of the max_clients slots (None: no bound).
        self._queue_timeout = queue_timeout

    @property
    def base_url(self):
        return self._base

    def sharing_key(self):
        """sharing_key says which clients reach spawnerd the same way (batched polls share them)."""
        return (self._base, self._timeout, self._http, self._max_clients, self._queue_timeout)

    def signed_with(self, token_for):
        """signed_with returns a client like this one whose every request carries ``token_for``'s token."""
        return Client(
            self._base,
            token_for,
            self._timeout,
            http_client=self._http,
            ping_interval=self._ping_interval,
            read_token_for=token_for,
            max_clients=self._max_clients,
            queue_timeout=self._queue_timeout,
        )

    def _headers(self, user, admin, read=False):
        token_for = self._read_token_for if read else self._token_for
        return {
            "Authorization": "Bearer " + token_for(user, admin),
            "Accept": "application/json",
        }

    async def _call(self, action, method, path, user, ok, body=None, admin=False, read=None):
        gate = shared_gate(self._max_clients)
        try:
            await gate.acquire(self._queue_timeout)
        except TimeoutError:
            taken, waiting = gate.busy()
            raise TransportError(
                f"{action}: no answer from spawnerd at {self._base} freed one of this hub's "
                f"{self._max_clients} request slots (http_max_clients) within {self._queue_timeout:g} s "
                f"(http_queue_timeout); {taken} in flight, {waiting} more waiting"
            ) from None
        try:
            return await self._send(action, method, path, user, ok, body, admin, read)
        finally:
            gate.release()

    async def _send(self, action, method, path, user, ok, body, admin, read):
        # The token is minted once the request has its slot, so a long wait cannot age it.
        headers = self._headers(user, admin, read=method == "GET" if read is None else read)
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body)
        elif method == "POST":
            data = ""
        request = HTTPRequest(
            self._base + path,
            method=method,
            headers=headers,
            body=data,
            connect_timeout=self._timeout,
            request_timeout=self._timeout,
        )
        http = self._http or shared_http_client(self._max_clients)
        try:
            response = await http.fetch(request, raise_error=False)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            raise TransportError(f"{action}: cannot reach spawnerd at {self._base}: {err}") from err
        if response.code == 599:
            raise TransportError(
                f"{action}: cannot reach spawnerd at {self._base}: {response.error}"
            )
        if response.code == 401:
            raise AuthError(action)
        if response.code == 404:
            error, _ = _error_body(response.body)
            raise MisroutedError(action, 404, error or response.reason or "", self._base + path)
        if response.code not in ok:
            error, field = _error_body(response.body)
            raise ServiceError(action, response.code, error or response.reason or "", field)
        if response.code == 204 or not response.body:
            return response.code, None
        try:
            data = json.loads(response.body)
        except ValueError as err:
            raise ServiceError(action, response.code, f"invalid JSON in answer: {err}") from err
        if not isinstance(data, dict):
            raise ServiceError(action, response.code, "answer is not a JSON object")
        return response.code, data

    async def profiles(self, user):
        """profiles returns spawnerd's profile list (KubeSpawner profile_list shape)."""
        _, data = await self._call("listing profiles", "GET", f"{API_PREFIX}/profiles", user, (200,))
        profiles = (data or {}).get("profiles") or []
        return [p for p in profiles if isinstance(p, dict)]

    async def start(self, user, server_name, body):
        """start asks spawnerd to start a server; it returns the server model."""
        _, model = await self._call(
            "starting server", "POST", server_path(user, server_name), user, (200, 201, 202), body
        )
        return model or {}

    async def status(self, user, server_name, hint=None):
        """status returns the server model (status "absent" when spawnerd does not know the server).

        ``hint`` is the hub's saved state (pod_name, namespace, pod_uid):
        where spawnerd looks if the server's pod carries no identity label.
        A 404, or a 200 that is not a server model, is a MisroutedError: it
        does not come from spawnerd.
        """
        path = server_path(user, server_name) + _hint_query(hint, "?")
        _, model = await self._call("reading server status", "GET", path, user, (200,))
        return checked_model(model, "reading server status", self._base + path)

    async def poll_many(self, items):
        """poll_many polls several servers in one request (POST /api/v1/polls).

        ``items`` are ``{"user", "server", "pod_name", "namespace", "pod_uid"}``
        dicts; the answer is one server model (or anything, unchecked) per item, in
        order. The token is a read token, as for a GET poll.
        """
        action = "polling servers"
        _, data = await self._call(
            action, "POST", POLLS_PATH, BATCH_SUBJECT, (200,), body={"servers": items}, admin=True, read=True
        )
        answers = (data or {}).get("servers")
        if not isinstance(answers, list) or len(answers) != len(items):
            raise MisroutedError(action, 200, f"answer has no list of {len(items)} servers", self._base + POLLS_PATH)
        return answers

    async def delete(self, user, server_name, now, wait=None, hint=None, by=None):
        """delete asks spawnerd to stop a server; it returns 204 (gone) or 202 (stopping).

        ``wait`` (seconds) caps how long spawnerd waits for the pod before
        answering 202; spawnerd clamps it to its --stop-wait. ``by`` is who
        asked the hub for the stop ({"kind", "name"}), for the session history.
        """
        query = {"now": "true" if now else "false"}
        if wait is not None:
            query["wait"] = f"{wait:g}s"
        if by and by.get("kind"):
            query["by"] = by["kind"]
            if by.get("name"):
                query["by_name"] = by["name"]
        path = server_path(user, server_name) + "?" + urlencode(query) + _hint_query(hint, "&")
        code, _ = await self._call("stopping server", "DELETE", path, user, (202, 204))
        return code

    async def delete_forever(self, user, server_name, state, user_id):
        """delete_forever asks spawnerd to delete a deleted server's PVC; it returns what happened to it.

        ``state`` is the hub's saved state: its ``pvc_name`` and ``namespace``
        say which PVC (spawnerd applies remember_pvc_name and delete_pvc).
        """
        query = {k: state[k] for k in ("pvc_name", "namespace") if state.get(k)}
        if user_id is not None:
            query["user_id"] = str(user_id)
        path = server_path(user, server_name) + "/storage"
        if query:
            path += "?" + urlencode(query)
        _, model = await self._call("deleting server storage", "DELETE", path, user, (200,))
        return model or {}

    async def progress(self, user, server_name):
        """progress opens the server's progress WebSocket and returns the connection."""
        action = "opening progress stream"
        url = self._base + server_path(user, server_name) + "/progress"
        if url.startswith("https://"):
            url = "wss://" + url[len("https://"):]
        elif url.startswith("http://"):
            url = "ws://" + url[len("http://"):]
        request = HTTPRequest(
            url,
            headers=self._headers(user, False, read=True),
            connect_timeout=self._timeout,
            request_timeout=self._timeout,
        )
        ping = {}
        if self._ping_interval:
            # tornado checks the last pong once per interval, so the timeout
            # must exceed the interval or a healthy stream would be closed.
            ping = {
                "ping_interval": self._ping_interval,
                "ping_timeout": self._ping_interval + self._timeout,
            }
        connecting = websocket_connect(request, **ping)
        try:
            # Shielded: cancelling a pending websocket_connect would leave its
            # socket open, so on cancel close the connection once it exists.
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:
            connecting.add_done_callback(_close_when_connected)
            raise
        except HTTPClientError as err:
            if err.code == 401:
                raise AuthError(action) from err
            raise TransportError(f"{action}: spawnerd answered {err.code}") from err
        except Exception as err:
            raise TransportError(f"{action}: cannot reach spawnerd at {self._base}: {err}") from err
