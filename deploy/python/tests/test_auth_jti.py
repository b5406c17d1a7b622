"""Token reuse as spawnerd allows it: a token used for a write (start, stop,
delete and each retry) is accepted once; a token used for a read (polls, the
progress socket, profiles) is accepted again for reads until it expires, never
for a write. Every token lives at most 60 s."""

import unittest

import jwt
from tornado.httpclient import AsyncHTTPClient

from support import SECRET, FakeSpawnerd, HubFixture, SpawnerTestCase, decode, model

from dsmlp_spawner.auth import TOKEN_LIFETIME, TokenSigner

URL = "http://10.0.0.7:8888/user/alice/"


class ReplayRefusingSpawnerd(FakeSpawnerd):
    """ReplayRefusingSpawnerd applies spawnerd's rule: a jti is accepted once, but
    for reads (GET) a token first used for a read is accepted again."""

    def __init__(self):
        super().__init__()
        self.seen = set()
        self.reads = set()  # jtis first used for a read
        self.replays = 0

    def authorized(self, handler):
        if not super().authorized(handler):
            return False
        token = handler.request.headers.get("Authorization", "").removeprefix("Bearer ")
        jti = decode(token, self.secret).get("jti")
        read = handler.request.method == "GET"
        if jti and read and jti in self.reads:
            return True
        if not jti or jti in self.seen:
            self.replays += 1
            return False
        self.seen.add(jti)
        if read:
            self.reads.add(jti)
        return True


class TestSingleUseTokens(SpawnerTestCase):
    async def asyncSetUp(self):
        self.fake = ReplayRefusingSpawnerd()
        await self.fake.start()
        self.hub = HubFixture()

    async def test_a_whole_spawn_never_replays_a_token(self):
        self.fake.ws_script = [{"progress": 50, "message": "pulling"}, {"progress": 100, "ready": True, "url": URL}]
        self.fake.status_replies = [(200, model("running", url=URL, state={"pod_name": "jupyter-alice", "namespace": "jhub"}))]
        self.fake.delete_replies = [503, 204]  # the retry needs a new token too
        spawner = self.spawner()
        spawner.start_timeout = 60

        self.assertEqual(await spawner.start(), URL)
        self.assertEqual([e async for e in spawner.progress()][-1]["url"], URL)
        self.assertIsNone(await spawner.poll())
        self.assertIsNone(await spawner.poll())
        await spawner.stop()

        self.assertEqual(self.fake.replays, 0)
        # POST and each DELETE try have a token of their own; the reads share one.
        writes = [decode(r.token)["jti"] for r in self.fake.requests if r.method != "GET"]
        self.assertEqual(len(writes), 3)
        self.assertEqual(len(set(writes)), 3)
        reads = {decode(r.token)["jti"] for r in self.fake.requests if r.method == "GET"}
        self.assertFalse(reads & set(writes))
        for req in self.fake.requests:
            claims = decode(req.token)
            self.assertLessEqual(claims["exp"] - claims["iat"], 60)

    async def test_the_fake_refuses_a_replay(self):
        # The check above is only as good as the fake: a token is never
        # reused for a write, and one used for reads never becomes a write's.
        signer = TokenSigner(lambda: SECRET)
        self.fake.status_replies = [(200, model("absent"))]
        self.fake.delete_replies = [204]
        http = AsyncHTTPClient()
        url = self.fake.url + "/api/v1/users/alice/server"

        async def send(method, token):
            response = await http.fetch(url, method=method, headers={"Authorization": "Bearer " + token}, raise_error=False)
            return response.code

        read = signer.read_token("alice")
        self.assertEqual([await send("GET", read), await send("GET", read), await send("DELETE", read)], [200, 200, 401])
        write = signer.token("alice")
        self.assertEqual([await send("DELETE", write), await send("DELETE", write), await send("GET", write)], [204, 401, 401])
        self.assertEqual(self.fake.replays, 3)


class TestReadTokens(unittest.TestCase):
    def test_read_token_is_shared_for_half_its_life(self):
        now = [1000.0]
        secret = [SECRET]
        signer = TokenSigner(lambda: secret[0], clock=lambda: now[0])
        first = signer.read_token("alice")
        now[0] += 29
        self.assertEqual(signer.read_token("alice"), first)
        self.assertNotEqual(signer.read_token("bob"), first)
        self.assertNotEqual(signer.read_token("alice", admin=True), first)
        self.assertNotEqual(signer.token("alice"), first)  # writes: always fresh
        now[0] += 1
        renewed = signer.read_token("alice")
        self.assertNotEqual(renewed, first)
        claims = jwt.decode(renewed, SECRET, algorithms=["HS256"], audience="spawnerd", options={"verify_exp": False})
        self.assertEqual(claims["iat"], 1030)
        # A rotated secret gets a token of its own at once.
        secret[0] = b"another-shared-secret-0123456789abcdef"
        self.assertNotEqual(signer.read_token("alice"), renewed)


class TestLifetime(unittest.TestCase):
    def test_lifetime_is_capped_at_spawnerds_limit(self):
        self.assertLessEqual(TOKEN_LIFETIME, 60)
        for bad in (0, -1, 61, 300):
            with self.subTest(lifetime=bad), self.assertRaises(ValueError):
                TokenSigner(lambda: SECRET, lifetime=bad)
        claims = jwt.decode(
            TokenSigner(lambda: SECRET, lifetime=30).token("bob"),
            SECRET,
            algorithms=["HS256"],
            audience="spawnerd",
        )
        self.assertEqual(claims["exp"] - claims["iat"], 30)


if __name__ == "__main__":
    unittest.main()
