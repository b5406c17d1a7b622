#!/usr/bin/env python3
"""Stop every user's servers through the hub's REST API and wait until they are gone.

Used by the demo on Ctrl-C, so that the hub, not a dying spawnerd, ends each
server: the hub records the stop, spawnerd deletes the pod, and nothing is left
for the hub to retry against a stopped service.

  hub-stop-servers.py HUB_API_URL TOKEN_FILE [TIMEOUT_SECONDS]

The token needs the scopes list:users, read:servers and delete:servers: the demo's
own demo-admin service token ($DEMO_DIR/hub-admin-token), not spawnerd's, which
may only stop servers. Exits 0 once no server is left, 1 if some are
still there at the timeout.
"""

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def call(api, token, method, path):
    req = urllib.request.Request(api + path, method=method, headers={"Authorization": "token " + token})
    with urllib.request.urlopen(req, timeout=5) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def servers(api, token):
    """(user, server name) of every server the hub has, running or pending."""
    out = []
    for user in call(api, token, "GET", "/users"):
        for name in (user.get("servers") or {}):
            out.append((user["name"], name))
    return out


def server_path(user, name):
    path = "/users/" + urllib.parse.quote(user, safe="")
    return path + ("/servers/" + urllib.parse.quote(name, safe="") if name else "/server")


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    api = argv[1].rstrip("/")
    with open(argv[2]) as f:
        token = f.read().strip()
    timeout = float(argv[3]) if len(argv) > 3 else 8.0
    deadline = time.monotonic() + timeout
    asked = set()
    while True:
        left = servers(api, token)
        if not left:
            return 0
        for user, name in left:
            if (user, name) in asked:
                continue
            asked.add((user, name))
            print(f"stopping {user}'s server {name or '(default)'}", file=sys.stderr)
            try:
                call(api, token, "DELETE", server_path(user, name))
            except urllib.error.HTTPError as e:
                # 400: already stopping; the wait below covers it.
                if e.code != 400:
                    print(f"stopping {user}/{name}: HTTP {e.code}", file=sys.stderr)
        if time.monotonic() > deadline:
            print(f"still running after {timeout:.0f} s: {left}", file=sys.stderr)
            return 1
        time.sleep(0.2)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError) as e:
        # The hub is already gone or never came up: nothing to stop through it.
        print(f"hub not reachable: {e}", file=sys.stderr)
        sys.exit(1)
