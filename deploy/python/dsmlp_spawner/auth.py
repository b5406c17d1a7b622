"""Shared-secret loading and the short-lived JWTs the hub presents to spawnerd."""

import os
import secrets
import time

import jwt

# TOKEN_LIFETIME is how long a token stays valid. spawnerd refuses tokens
# that live longer than 60 s, and accepts each jti once (it remembers jtis
# for a token's lifetime), so one token is minted per request, with a fresh jti.
TOKEN_LIFETIME = 60

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

    def __init__(self, secret, clock=time.time, lifetime=TOKEN_LIFETIME):
        if not 0 < lifetime <= TOKEN_LIFETIME:
            raise ValueError(
                f"token lifetime must be from 1 to {TOKEN_LIFETIME} s (spawnerd's limit), got {lifetime}"
            )
        self._secret = secret
        self._clock = clock
        self._lifetime = lifetime

    def token(self, user, admin=False):
        """token returns a signed JWT whose subject is the raw hub user name."""
        now = int(self._clock())
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": user,
            "admin": bool(admin),
            "iat": now,
            "exp": now + self._lifetime,
            "jti": secrets.token_urlsafe(16),
        }
        return jwt.encode(claims, self._secret(), algorithm="HS256")
