"""JupyterHub config for the demo and the end-to-end tests: everything on 127.0.0.1, pods via spawnerd.

Run from anywhere: ``python3 -m jupyterhub -f deploy/demo/jupyterhub_config.py``.
Everything is read from the environment, with defaults for a single-machine demo:

  HUB_PORT=8081            the hub's own API/pages (127.0.0.1)
  PROXY_PORT=8000          configurable-http-proxy's public port (127.0.0.1)
  PROXY_API_PORT=8001      configurable-http-proxy's REST API (127.0.0.1)
  PROXY_SHOULD_START=1     0: use an already running proxy (CONFIGPROXY_AUTH_TOKEN must match)
  SPAWNERD_URL=http://127.0.0.1:8090
  SPAWNERD_SHARED_SECRET   or SPAWNERD_SHARED_SECRET_FILE: the secret shared with spawnerd
  SPAWNERD_HUB_TOKEN       API token of the hub service "spawnerd": spawnerd tells the hub of stops with it,
                           and its console (/services/spawnerd/) logs users in through the hub's OAuth
  SPAWNERD_CONSOLE_URL     where the proxy reaches spawnerd's console, default $SPAWNERD_URL
  HUB_CONSOLE_USERS        comma-separated users (not admins) who may use spawnerd's console
  HUB_CULLER_TOKEN         token of service "idle-culler" (the idle culler's scopes), for a culler
  DEMO_HUB_ADMIN_TOKEN     demo only: token of service "demo-admin", which lists and stops every
                           server (hack/hub-stop-servers.py on Ctrl-C, the demo test)
  HUB_CONNECT_URL          how notebook servers reach the hub, default http://127.0.0.1:$HUB_PORT
  HUB_ADMIN_USER           an admin user, created at startup
  HUB_DUMMY_PASSWORD       password for every user (DummyAuthenticator); unset = any password
  HUB_START_TIMEOUT=120    Spawner.start_timeout, seconds
  HUB_HTTP_TIMEOUT=30      Spawner.http_timeout, seconds
  HUB_POLL_INTERVAL=30     Spawner.poll_interval, seconds
  HUB_CONCURRENT_SPAWN_LIMIT=100  JupyterHub.concurrent_spawn_limit: spawns pending at once before the hub
                           answers 429 (0: no limit)
  HUB_ACTIVE_SERVER_LIMIT=0       JupyterHub.active_server_limit: servers active at once (0: no limit)
  HUB_SPAWNER_CLASS=dsmlp_spawner.RemoteKubeSpawner  JupyterHub.spawner_class; benchmarks put a
                           null spawner in the same hub to measure the hub's own floor
  HUB_CLEANUP_SERVERS=1    0: servers keep running across a hub restart (and are resumed)
  HUB_DATA_DIR=.           where the hub keeps its sqlite database, cookie secret and pid files
  HUB_LOG_LEVEL=INFO
"""

import os
import sys

import jupyterhub

c = get_config()  # noqa: F821 (provided by the config loader)


def env(name, default):
    value = os.environ.get(name, "")
    return value if value != "" else default


def env_int(name, default):
    return int(env(name, str(default)))


# The spawner class lives beside this folder; an installed copy works too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

hub_port = env_int("HUB_PORT", 8081)
proxy_port = env_int("PROXY_PORT", 8000)
proxy_api_port = env_int("PROXY_API_PORT", 8001)
data_dir = os.path.abspath(env("HUB_DATA_DIR", "."))

# --- network: all on loopback ---------------------------------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = proxy_port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = hub_port
c.JupyterHub.hub_connect_url = env("HUB_CONNECT_URL", f"http://127.0.0.1:{hub_port}")

c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = os.path.join(data_dir, "jupyterhub-proxy.pid")
c.ConfigurableHTTPProxy.should_start = env("PROXY_SHOULD_START", "1") not in ("0", "false", "no")
if os.path.isdir("/usr/share/nodejs"):
    # Debian's configurable-http-proxy finds its modules only there.
    os.environ.setdefault("NODE_PATH", "/usr/share/nodejs")

c.JupyterHub.db_url = "sqlite:///" + os.path.join(data_dir, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(data_dir, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(data_dir, "jupyterhub.pid")
c.JupyterHub.log_level = env("HUB_LOG_LEVEL", "INFO")
c.JupyterHub.cleanup_servers = env("HUB_CLEANUP_SERVERS", "1") not in ("0", "false", "no")

# --- users -------------------------------------------------------------------
c.JupyterHub.authenticator_class = "dummy"
if os.environ.get("HUB_DUMMY_PASSWORD"):
    c.DummyAuthenticator.password = os.environ["HUB_DUMMY_PASSWORD"]
if jupyterhub.version_info >= (5,):
    # 5.x refuses every login unless told who may log in; 3.x has no such switch.
    c.Authenticator.allow_all = True
admin = os.environ.get("HUB_ADMIN_USER")
if admin:
    c.Authenticator.admin_users = {admin}

c.JupyterHub.allow_named_servers = True

# --- spawning through spawnerd --------------------------------------------
c.JupyterHub.spawner_class = env("HUB_SPAWNER_CLASS", "dsmlp_spawner.RemoteKubeSpawner")
c.JupyterHub.concurrent_spawn_limit = env_int("HUB_CONCURRENT_SPAWN_LIMIT", 100)
c.JupyterHub.active_server_limit = env_int("HUB_ACTIVE_SERVER_LIMIT", 0)
c.RemoteKubeSpawner.service_url = env("SPAWNERD_URL", "http://127.0.0.1:8090")
if os.environ.get("SPAWNERD_SHARED_SECRET_FILE"):
    c.RemoteKubeSpawner.shared_secret_file = os.environ["SPAWNERD_SHARED_SECRET_FILE"]
c.Spawner.start_timeout = env_int("HUB_START_TIMEOUT", 120)
c.Spawner.http_timeout = env_int("HUB_HTTP_TIMEOUT", 30)
c.Spawner.poll_interval = env_int("HUB_POLL_INTERVAL", 30)

# --- spawnerd's own identity at the hub --------------------------------------
# An external service: the hub does not start it, but proxies its console at
# /services/spawnerd/ and lists it in the Services menu. spawnerd's one API
# call with its own token is DELETE /users/{name}/server[s/{server}] when a
# server stopped on its own, which needs delete:servers and nothing else
# (routes are checked with the proxy's own token). Its console logs users in
# through the hub's OAuth: hub admins, and users with the custom scope below,
# get the console; every other user the status page. The console's stop
# button calls the hub with the admin's own token (admin:servers), so the hub
# records who stopped the server.
services, roles = [], []
CONSOLE_SCOPE = "custom:spawnerd:console"
c.JupyterHub.custom_scopes = {
    CONSOLE_SCOPE: {"description": "Use spawnerd's console: every server, the session history, the GPU classes."},
}


def token_service(name, env_var, description, scopes, **extra):
    """A service whose token is in env_var, with a role of its own."""
    token = os.environ.get(env_var)
    if token:
        services.append({"name": name, "api_token": token, **extra})
        roles.append({"name": name, "description": description, "services": [name], "scopes": scopes})
    return bool(token)


console = token_service(
    "spawnerd",
    "SPAWNERD_HUB_TOKEN",
    "spawnerd: tell the hub a server stopped",
    ["delete:servers"],
    url=env("SPAWNERD_CONSOLE_URL", env("SPAWNERD_URL", "http://127.0.0.1:8090")),
    display=True,
    oauth_no_confirm=True,
    oauth_client_allowed_scopes=[CONSOLE_SCOPE, "admin:servers"],
)
if console:
    # Every user may log in to the service, for the status page.
    roles.append({"name": "user", "scopes": ["self", "access:services!service=spawnerd"]})
    console_users = [u for u in os.environ.get("HUB_CONSOLE_USERS", "").split(",") if u]
    if console_users:
        roles.append({"name": "spawnerd-console", "description": "spawnerd's console, without being a hub admin",
                      "scopes": [CONSOLE_SCOPE], "users": console_users})
# The idle culler's scopes (jupyterhub-idle-culler's documentation).
token_service("idle-culler", "HUB_CULLER_TOKEN", "the idle culler", ["list:users", "read:users:activity", "read:servers", "delete:servers"])
# Demo only: what hack/hub-stop-servers.py needs to stop every server on Ctrl-C.
token_service("demo-admin", "DEMO_HUB_ADMIN_TOKEN", "demo: list users and stop their servers",
              ["list:users", "read:servers", "delete:servers"])
c.JupyterHub.services = services
c.JupyterHub.load_roles = roles
