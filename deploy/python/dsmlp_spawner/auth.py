"""Shared-secret loading and the short-lived JWTs the hub presents to spawnerd."""

import os
import secrets
import time

import jwt

# TOKEN_LIFETIME is how long a token stays valid. spawnerd refuses tokens
# that live longer than 60 s. A token used for a write (start, stop, delete)
# is accepted once, so each write gets a fresh one; a token used for a read
# (poll, progress, profiles) spawnerd accepts again for reads until it
# expires, so reads share one token per user for READ_REUSE seconds.
TOKEN_LIFETIME = 60

# READ_REUSE is how long a read token is handed out again: half its life,
# so it still has 30 s left when its last read is sent.
READ_REUSE = 30

ISSUER = "jupyterhub"
AUDIENCE = "spawnerd"


class SecretError(RuntimeError):
    """SecretError means the shared secret could not be found or read.

    Its ``jupyterhub_message`` is what the hub shows on the spawn page.
    """

    def __init__(self, message):
        super().__init__(message)
        self.jupyterhub_message = message


def missing_message(env_name, detail=""):
    """missing_message tells the operator how to provide the secret."""
    prefix = f"spawnerd shared secret {detail}: " if detail else "spawnerd shared secret "
    return f"{prefix}missing: set shared_secret_file or ${env_name}"


def read_secret(path, env_name, environ=None):
    """read_secret returns the shared secret as bytes.

    A configured file wins over the environment variable. File contents have
    trailing whitespace stripped (files usually end in a newline); the
    environment value is used exactly as set.
    """
    environ = os.environ if environ is None else environ
    if path:
        try:
            with open(path, "rb") as f:
                secret = f.read().rstrip()
        except OSError as err:
            raise SecretError(
                missing_message(env_name, f"file {path} unreadable ({err.strerror})")
            ) from err
        if not secret:
            raise SecretError(missing_message(env_name, f"file {path} is empty"))
        return secret
    value = environ.get(env_name, "") if env_name else ""
    if not value:
        raise SecretError(missing_message(env_name))
    return value.encode("utf-8")


class TokenSigner:
    """TokenSigner mints one HS256 JWT per spawnerd request.

    ``secret`` is a callable returning the key bytes, so a rotated secret file
    is picked up without restarting the hub.
    """

    def __init__(self, secret, clock=time.time, lifetime=TOKEN_LIFETIME, read_reuse=READ_REUSE):
        if not 0 < lifetime <= TOKEN_LIFETIME:
            raise ValueError(
                f"token lifetime must be from 1 to {TOKEN_LIFETIME} s (spawnerd's limit), got {lifetime}"
            )
        self._secret = secret
        self._clock = clock
        self._lifetime = lifetime
        self._read_reuse = min(read_reuse, lifetime / 2)
        # (user, admin, key) -> (token, minted at): the read token in use.
        self._reads = {}

    def read_token(self, user, admin=False):
        """read_token returns the user's read token, minted anew every READ_REUSE seconds.

        spawnerd accepts it again for reads (GET) until it expires, never for
        a write, so a poll costs no signing here and no full check there.
        The secret is part of the key: a rotated secret gets a new token.
        """
        now = self._clock()
        secret = self._secret()
        key = (user, bool(admin), secret)
        cached = self._reads.get(key)
        if cached is not None and now - cached[1] < self._read_reuse:
            return cached[0]
        token = self._sign(user, admin, now, secret)
        if len(self._reads) > 10000:
            # Users who stopped polling: forget them all, the rest re-mint.
            self._reads.clear()
        self._reads[key] = (token, now)
        return token

    def token(self, user, admin=False):
        """token returns a signed JWT whose subject is the raw hub user name."""
        return self._sign(user, admin, self._clock(), self._secret())

    def _sign(self, user, admin, now, secret):
        now = int(now)
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": user,
            "admin": bool(admin),
            "iat": now,
            "exp": now + self._lifetime,
            "jti": secrets.token_urlsafe(16),
        }
        return jwt.encode(claims, secret, algorithm="HS256")
