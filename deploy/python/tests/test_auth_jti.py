"""Single-use tokens: spawnerd accepts each jti once, so every call the class
makes (start, its progress socket, polls, stop and its retries) must carry a
token of its own, living at most 60 s."""

import unittest

import jwt
from tornado.httpclient import AsyncHTTPClient

from support import SECRET, FakeSpawnerd, HubFixture, SpawnerTestCase, decode, model

from dsmlp_spawner.auth import TOKEN_LIFETIME, TokenSigner

URL = "http://10.0.0.7:8888/user/alice/"


class ReplayRefusingSpawnerd(FakeSpawnerd):
    """ReplayRefusingSpawnerd answers 401 to a token whose jti it has seen, as spawnerd does."""

    def __init__(self):
        super().__init__()
        self.seen = set()
        self.replays = 0

    def authorized(self, handler):
        if not super().authorized(handler):
            return False
        token = handler.request.headers.get("Authorization", "").removeprefix("Bearer ")
        jti = decode(token, self.secret).get("jti")
        if not jti or jti in self.seen:
            self.replays += 1
            return False
        self.seen.add(jti)
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
        self.assertGreaterEqual(len(self.fake.seen), 6)  # POST, socket, 2 GETs, 2 DELETEs
        for req in self.fake.requests:
            claims = decode(req.token)
            self.assertLessEqual(claims["exp"] - claims["iat"], 60)

    async def test_the_fake_refuses_a_replay(self):
        # The check above is only as good as the fake: a reused token is refused.
        token = TokenSigner(lambda: SECRET).token("alice")
        self.fake.status_replies = [(200, model("absent"))]
        http = AsyncHTTPClient()
        codes = []
        for _ in range(2):
            response = await http.fetch(
                self.fake.url + "/api/v1/users/alice/server",
                headers={"Authorization": "Bearer " + token},
                raise_error=False,
            )
            codes.append(response.code)
        self.assertEqual(codes, [200, 401])
        self.assertEqual(self.fake.replays, 1)


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
