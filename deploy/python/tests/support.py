"""Test support: a scripted spawnerd on a free loopback port, and spawners wired to a real hub ORM."""

import asyncio
import json
import logging
import os
import sys
import tempfile
import unittest
from urllib.parse import parse_qs

import jwt
from tornado import web, websocket
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jupyterhub import orm  # noqa: E402
from jupyterhub.objects import Hub  # noqa: E402
from jupyterhub.user import User  # noqa: E402
from traitlets.config import Config  # noqa: E402

from dsmlp_spawner import RemoteKubeSpawner  # noqa: E402

# The hub database's migration tool logs at INFO each time one is created.
logging.disable(logging.INFO)

SECRET = b"test-shared-secret-0123456789abcdef"


def decode(token, secret=SECRET):
    """decode verifies a token the way spawnerd does and returns its claims."""
    return jwt.decode(
        token, secret, algorithms=["HS256"], audience="spawnerd", issuer="jupyterhub"
    )


class Recorded:
    """Recorded is one request the fake received."""

    def __init__(self, method, path, query, headers, body):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    @property
    def token(self):
        return self.headers.get("Authorization", "").removeprefix("Bearer ")

    def json(self):
        return json.loads(self.body)


class FakeSpawnerd:
    """FakeSpawnerd plays spawnerd's API from per-test scripts and records every request.

    Scripts:
      post_reply      (status, body) for POST
      status_replies  list of (status, body) for GET, consumed in order; the last repeats
                      (default: 200 with status "absent", as spawnerd answers an unknown server)
      delete_replies  list of statuses for DELETE, consumed in order; the last repeats
      ws_script       list of dicts (sent as JSON), floats (sleep seconds), or "hold"
                      (keep the socket open until the client closes it); then close
      profiles        list returned by GET /api/v1/profiles
      ws_status       if set, the progress upgrade is refused with this status
      polls_status    if set, POST /api/v1/polls answers this status (404: an older spawnerd)
      post_delay      seconds a POST start takes before its answer (``post_peak`` keeps the most
                      POSTs in flight at once)
    A batched poll (POST /api/v1/polls) answers each of its servers from status_replies in
    turn; a reply other than 200 answers the whole batch. Batches are kept in ``batches`` (a
    list of item lists), not in ``requests``, and ``polled()`` lists every poll's hint.
    Tokens are verified with ``secret``; a bad one gets 401 as spawnerd would.
    """

    def __init__(self, secret=SECRET):
        self.secret = secret
        self.requests = []
        self.post_reply = (202, {"status": "pending", "state": {}})
        # spawnerd's answer for a server it does not know (it never answers 404).
        self.status_replies = [(200, {"user": "alice", "server": "", "status": "absent", "url": None, "state": {}})]
        self.delete_replies = [204]
        self.ws_script = []
        self.ws_closed = asyncio.Event()
        self.profiles = []
        self.ws_status = None  # answer the progress upgrade with this status instead
        self.polls_status = None
        self.post_delay = 0
        self.posts_in_flight = 0
        self.post_peak = 0
        self.batches = []
        self.batch_tokens = []
        self._server = None
        self.port = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def record(self, handler):
        req = handler.request
        self.requests.append(
            Recorded(
                req.method,
                req.path,
                {k: v[0] for k, v in parse_qs(req.query).items()},
                dict(req.headers),
                req.body.decode() if req.body else "",
            )
        )

    def authorized(self, handler):
        token = handler.request.headers.get("Authorization", "").removeprefix("Bearer ")
        try:
            decode(token, self.secret)
        except jwt.PyJWTError:
            return False
        return True

    def of(self, method):
        return [r for r in self.requests if r.method == method]

    def polled(self):
        """polled returns the hint of every poll, GET or batched, in the order they came."""
        out = [dict(r.query) for r in self.requests if r.method == "GET" and r.path.count("/") <= 6
               and not r.path.endswith(("/progress", "/profiles"))]
        for items in self.batches:
            out += [{k: v for k, v in item.items() if k not in ("user", "server")} for item in items]
        return out

    async def start(self):
        app = web.Application(
            [
                (r"/api/v1/profiles", _ProfilesHandler, {"fake": self}),
                (r"/api/v1/polls", _PollsHandler, {"fake": self}),
                (r"/api/v1/users/[^/]+/(?:server|servers/[^/]+)/progress", _ProgressHandler, {"fake": self}),
                (r"/api/v1/users/[^/]+/(?:server|servers/[^/]+)", _ServerHandler, {"fake": self}),
            ]
        )
        sockets = bind_sockets(0, "127.0.0.1")
        self.port = sockets[0].getsockname()[1]
        self._server = HTTPServer(app)
        self._server.add_sockets(sockets)

    async def stop(self):
        self._server.stop()
        await self._server.close_all_connections()


def _take(replies):
    return replies.pop(0) if len(replies) > 1 else replies[0]


class _Base(web.RequestHandler):
    def initialize(self, fake):
        self.fake = fake

    def prepare(self):
        self.fake.record(self)
        if not self.fake.authorized(self):
            self.reply(401, {"error": "invalid token"})

    def reply(self, status, body=None):
        self.set_status(status)
        if body is not None:
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(body))
        else:
            self.finish()


class _ProfilesHandler(_Base):
    def get(self):
        self.reply(200, {"profiles": self.fake.profiles})


class _PollsHandler(web.RequestHandler):
    def initialize(self, fake):
        self.fake = fake

    def post(self):
        fake = self.fake
        token = self.request.headers.get("Authorization", "").removeprefix("Bearer ")
        try:
            claims = decode(token, fake.secret)
        except jwt.PyJWTError:
            return _reply(self, 401, {"error": "invalid token"})
        if fake.polls_status is not None:
            return _reply(self, fake.polls_status, {"error": "not found"})
        items = json.loads(self.request.body)["servers"]
        fake.batches.append(items)
        fake.batch_tokens.append(claims)
        answers = []
        for _ in items:
            status, body = _take(fake.status_replies)
            if status != 200:
                return _reply(self, status, body)
            answers.append(body)
        _reply(self, 200, {"servers": answers})


def _reply(handler, status, body):
    handler.set_status(status)
    handler.set_header("Content-Type", "application/json")
    handler.finish(json.dumps(body))


class _ServerHandler(_Base):
    def get(self):
        self.reply(*_take(self.fake.status_replies))

    async def post(self):
        fake = self.fake
        fake.posts_in_flight += 1
        fake.post_peak = max(fake.post_peak, fake.posts_in_flight)
        try:
            if fake.post_delay:
                await asyncio.sleep(fake.post_delay)
        finally:
            fake.posts_in_flight -= 1
        self.reply(*fake.post_reply)

    def delete(self):
        status = _take(self.fake.delete_replies)
        self.reply(status, {"error": "no such server"} if status == 404 else None)


class _ProgressHandler(websocket.WebSocketHandler):
    def initialize(self, fake):
        self.fake = fake

    def prepare(self):
        self.fake.record(self)
        if not self.fake.authorized(self):
            self.set_status(401)
            self.finish(json.dumps({"error": "invalid token"}))
        elif self.fake.ws_status is not None:
            self.set_status(self.fake.ws_status)
            self.finish(json.dumps({"error": "refused"}))

    async def open(self):
        asyncio.ensure_future(self._play())

    async def _play(self):
        for step in list(self.fake.ws_script):
            if step == "hold":
                return
            if isinstance(step, (int, float)):
                await asyncio.sleep(step)
                continue
            try:
                await self.write_message(json.dumps(step))
            except websocket.WebSocketClosedError:
                return
        self.close()

    def on_close(self):
        self.fake.ws_closed.set()


class HubFixture:
    """HubFixture holds a real in-memory hub ORM, so spawners get users, names and prefixes as in the hub."""

    def __init__(self):
        self.db = orm.new_session_factory("sqlite://")()
        # Creating the hub database configures logging (alembic's fileConfig);
        # keep test output to failures.
        for name in ("asyncio", "tornado.access", "tornado.general", "traitlets"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self.hub = Hub(ip="127.0.0.1", port=8081, base_url="/hub/")
        self._tmp = tempfile.TemporaryDirectory()

    def close(self):
        self.db.close()
        self._tmp.cleanup()

    def secret_file(self, content):
        path = os.path.join(self._tmp.name, f"secret-{len(os.listdir(self._tmp.name))}")
        with open(path, "wb") as f:
            f.write(content)
        return path

    def spawner(self, service_url, user="alice", server="", secret=SECRET + b"\n", **traits):
        """spawner builds a RemoteKubeSpawner the way the hub does (User._new_spawner)."""
        cfg = Config()
        cfg.RemoteKubeSpawner.service_url = service_url
        cfg.RemoteKubeSpawner.poll_retry = 0.05
        cfg.RemoteKubeSpawner.request_timeout = 5
        if secret is not None:
            cfg.RemoteKubeSpawner.shared_secret_file = self.secret_file(secret)
        cfg.RemoteKubeSpawner.shared_secret_env = ""
        for name, value in traits.items():
            setattr(cfg.RemoteKubeSpawner, name, value)
        orm_user = self.db.query(orm.User).filter_by(name=user).first()
        if orm_user is None:
            orm_user = orm.User(name=user)
            self.db.add(orm_user)
            self.db.commit()
        hub_user = User(orm_user, settings={"hub": self.hub, "config": cfg, "db": self.db})
        spawner = hub_user._new_spawner(server, spawner_class=RemoteKubeSpawner)
        base_url = hub_user.url + (server + "/" if server else "")
        spawner.orm_spawner.server = orm.Server(base_url=base_url, ip="127.0.0.1", port=8888)
        self.db.commit()
        return spawner


def model(status, url=None, exit_code=None, message="", state=None):
    """model builds a spawnerd server model."""
    return {
        "user": "alice",
        "server": "",
        "status": status,
        "url": url,
        "exit_code": exit_code,
        "message": message,
        "pod": "jupyter-alice",
        "namespace": "jhub",
        "node": "node-1",
        "pod_ip": "127.0.1.2",
        "state": state if state is not None else {"pod_name": "jupyter-alice", "namespace": "jhub"},
    }


def closed_port_url():
    """closed_port_url is a loopback URL where nothing listens."""
    sock = bind_sockets(0, "127.0.0.1")[0]
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


class SpawnerTestCase(unittest.IsolatedAsyncioTestCase):
    """SpawnerTestCase gives each test a fresh fake spawnerd and hub ORM."""

    async def asyncSetUp(self):
        self.fake = FakeSpawnerd()
        await self.fake.start()
        self.hub = HubFixture()

    async def asyncTearDown(self):
        await self.fake.stop()
        self.hub.close()

    def spawner(self, **kwargs):
        return self.hub.spawner(self.fake.url, **kwargs)
