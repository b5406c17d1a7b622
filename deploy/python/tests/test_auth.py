"""Tokens, secrets and request paths: what spawnerd sees on every call."""

import logging
import os
import time
import unittest
from unittest import mock

import jwt

from support import SECRET, HubFixture, SpawnerTestCase, decode, model

from dsmlp_spawner.auth import SecretError, TokenSigner, read_secret
from dsmlp_spawner.client import WRONG_SECRET, AuthError, server_path

MISSING = "missing: set shared_secret_file or $SPAWNERD_SHARED_SECRET"


class TestTokenSigner(unittest.TestCase):
    def test_claims(self):
        signer = TokenSigner(lambda: SECRET, clock=lambda: 1000.7)
        claims = jwt.decode(
            signer.token("alice@example.org"),
            SECRET,
            algorithms=["HS256"],
            audience="spawnerd",
            issuer="jupyterhub",
            options={"verify_exp": False, "verify_iat": False},
        )
        jti = claims.pop("jti")
        self.assertEqual(
            claims,
            {
                "iss": "jupyterhub",
                "aud": "spawnerd",
                "sub": "alice@example.org",
                "admin": False,
                "iat": 1000,
                "exp": 1060,
            },
        )
        self.assertGreaterEqual(len(jti), 16)

    def test_admin_and_unique_ids(self):
        signer = TokenSigner(lambda: SECRET)
        first, second = decode(signer.token("bob", admin=True)), decode(signer.token("bob"))
        self.assertIs(first["admin"], True)
        self.assertIs(second["admin"], False)
        self.assertNotEqual(first["jti"], second["jti"])

    def test_header(self):
        token = TokenSigner(lambda: SECRET).token("bob")
        self.assertEqual(jwt.get_unverified_header(token), {"alg": "HS256", "typ": "JWT"})

    def test_other_secret_does_not_verify(self):
        token = TokenSigner(lambda: b"another secret").token("bob")
        with self.assertRaises(jwt.InvalidSignatureError):
            decode(token)


class TestReadSecret(unittest.TestCase):
    def setUp(self):
        self.hub = HubFixture()
        self.addCleanup(self.hub.close)

    def test_sources(self):
        path = self.hub.secret_file(b"  s3cret \t\r\n\n")
        empty = self.hub.secret_file(b" \n")
        cases = {
            "file strips trailing whitespace only": (path, {}, b"  s3cret"),
            "file wins over env": (path, {"SPAWNERD_SHARED_SECRET": "env"}, b"  s3cret"),
            "env used verbatim": ("", {"SPAWNERD_SHARED_SECRET": "env value "}, b"env value "),
            "missing everywhere": ("", {}, MISSING),
            "empty env": ("", {"SPAWNERD_SHARED_SECRET": ""}, MISSING),
            "empty file": (empty, {}, "is empty"),
            "unreadable file": (path + ".absent", {}, "unreadable"),
        }
        for name, (file, env, want) in cases.items():
            with self.subTest(name):
                if isinstance(want, bytes):
                    self.assertEqual(read_secret(file, "SPAWNERD_SHARED_SECRET", env), want)
                    continue
                with self.assertRaises(SecretError) as ctx:
                    read_secret(file, "SPAWNERD_SHARED_SECRET", env)
                message = str(ctx.exception)
                self.assertIn(MISSING, message)
                self.assertIn(want.split(":")[0], message)
                self.assertEqual(ctx.exception.jupyterhub_message, message)


class TestServerPath(unittest.TestCase):
    def test_quoting(self):
        cases = {
            ("alice", ""): "/api/v1/users/alice/server",
            ("alice", "gpu"): "/api/v1/users/alice/servers/gpu",
            ("a.b@example.org", "my server"): "/api/v1/users/a.b%40example.org/servers/my%20server",
            ("x/y", "a/b?c"): "/api/v1/users/x%2Fy/servers/a%2Fb%3Fc",
        }
        for (user, server), want in cases.items():
            with self.subTest(user=user, server=server):
                self.assertEqual(server_path(user, server), want)


class TestRequests(SpawnerTestCase):
    async def test_every_call_carries_a_valid_token(self):
        self.fake.status_replies = [(200, model("running", url="http://127.0.1.2:8888"))]
        spawner = self.spawner(user="alice@example.org", server="gpu one", poll_batch_window=0)
        spawner.load_state({"pod_name": "jupyter-alice-40example-2eorg--gpu-20one"})
        before = int(time.time())
        self.assertIsNone(await spawner.poll())
        self.assertIsNone(await spawner.poll())
        gets = self.fake.of("GET")
        self.assertEqual(len(gets), 2)
        ids = set()
        for req in gets:
            self.assertEqual(req.path, "/api/v1/users/alice%40example.org/servers/gpu%20one")
            self.assertTrue(req.headers["Authorization"].startswith("Bearer "))
            claims = decode(req.token)
            self.assertEqual(claims["sub"], "alice@example.org")
            self.assertIs(claims["admin"], False)
            self.assertEqual(claims["exp"] - claims["iat"], 60)
            self.assertGreaterEqual(claims["iat"], before)
            ids.add(claims["jti"])
        # Polls are reads: they share the user's read token (spawnerd
        # accepts it again for reads until it expires).
        self.assertEqual(len(ids), 1)


    async def test_batched_polls_carry_the_hubs_read_token(self):
        self.fake.status_replies = [(200, model("running", url="http://127.0.1.2:8888"))]
        spawner = self.spawner(user="alice@example.org", server="gpu one")
        spawner.load_state({"pod_name": "jupyter-alice-40example-2eorg--gpu-20one"})
        before = int(time.time())
        self.assertIsNone(await spawner.poll())
        self.assertIsNone(await spawner.poll())
        self.assertEqual(self.fake.of("GET"), [])
        self.assertEqual(len(self.fake.batches), 2)
        self.assertEqual(self.fake.batches[0], [{"user": "alice@example.org", "server": "gpu one",
                                                 "pod_name": "jupyter-alice-40example-2eorg--gpu-20one"}])
        # A batch covers many users' servers: the hub's own admin token, a read
        # token shared by the batches until it is re-minted.
        ids = set()
        for claims in self.fake.batch_tokens:
            self.assertEqual(claims["sub"], "jupyterhub")
            self.assertIs(claims["admin"], True)
            self.assertEqual(claims["exp"] - claims["iat"], 60)
            self.assertGreaterEqual(claims["iat"], before)
            ids.add(claims["jti"])
        self.assertEqual(len(ids), 1)


class TestSecretProblems(SpawnerTestCase):
    async def test_missing_secret_logged_at_construction_and_raised_by_start(self):
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("SPAWNERD_SHARED_SECRET", None)
            with self.assertLogs("traitlets", logging.ERROR) as logs:
                spawner = self.spawner(secret=None, shared_secret_env="SPAWNERD_SHARED_SECRET")
            self.assertIn(MISSING, "\n".join(logs.output))
            with self.assertRaises(SecretError) as ctx:
                await spawner.start()
        self.assertIn(MISSING, str(ctx.exception))
        self.assertIn(MISSING, ctx.exception.jupyterhub_message)
        self.assertEqual(self.fake.requests, [])
        self.assertEqual(await spawner.poll(), 0)

    async def test_env_secret_is_used(self):
        env = {"DSMLP_TEST_SECRET": SECRET.decode()}
        self.fake.post_reply = (200, model("running", url="http://127.0.1.2:8888"))
        with mock.patch.dict(os.environ, env):
            spawner = self.spawner(secret=None, shared_secret_env="DSMLP_TEST_SECRET")
            self.assertEqual(await spawner.start(), "http://127.0.1.2:8888")
        self.assertEqual(decode(self.fake.of("POST")[0].token)["sub"], "alice")

    async def test_wrong_secret(self):
        spawner = self.spawner(secret=b"not the shared secret")
        with self.assertRaises(AuthError) as ctx:
            await spawner.start()
        self.assertEqual(str(ctx.exception), WRONG_SECRET)
        self.assertEqual(ctx.exception.jupyterhub_message, WRONG_SECRET)
        self.assertEqual(len(self.fake.of("POST")), 1)
        self.assertEqual(await spawner.poll(), 0)  # refused, so nothing to ask about
        self.assertEqual(len(self.fake.requests), 1)

        spawner.load_state({"pod_name": "jupyter-alice"})
        with self.assertLogs("traitlets", logging.ERROR) as logs:
            self.assertIsNone(await spawner.poll())
        self.assertIn(WRONG_SECRET, "\n".join(logs.output))
        with self.assertRaises(AuthError):
            await spawner.stop()


if __name__ == "__main__":
    unittest.main()
