"""JupyterHub config for the demo and the end-to-end tests: everything on 127.0.0.1, pods via spawnerd.

Run from anywhere: ``python3 -m jupyterhub -f deploy/demo/jupyterhub_config.py``.
Everything is read from the environment, with defaults for a single-machine demo:

  HUB_PORT=8081            the hub's own API/pages (127.0.0.1)
  PROXY_PORT=8000          configurable-http-proxy's public port (127.0.0.1)
  PROXY_API_PORT=8001      configurable-http-proxy's REST API (127.0.0.1)
  PROXY_SHOULD_START=1     0: use an already running proxy (CONFIGPROXY_AUTH_TOKEN must match)
  SPAWNERD_URL=http://127.0.0.1:8090
  SPAWNERD_SHARED_SECRET   or SPAWNERD_SHARED_SECRET_FILE: the secret shared with spawnerd
  SPAWNERD_HUB_TOKEN       API token spawnerd uses to call the hub (token-only service "spawnerd")
  DEMO_HUB_ADMIN_TOKEN     demo only: token of service "demo-admin", which lists and stops every
                           server (hack/hub-stop-servers.py on Ctrl-C, the demo test)
  HUB_CONNECT_URL          how notebook servers reach the hub, default http://127.0.0.1:$HUB_PORT
  HUB_ADMIN_USER           an admin user, created at startup
  HUB_DUMMY_PASSWORD       password for every user (DummyAuthenticator); unset = any password
  HUB_START_TIMEOUT=120    Spawner.start_timeout, seconds
  HUB_HTTP_TIMEOUT=30      Spawner.http_timeout, seconds
  HUB_POLL_INTERVAL=30     Spawner.poll_interval, seconds
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
c.JupyterHub.spawner_class = "dsmlp_spawner.RemoteKubeSpawner"
c.RemoteKubeSpawner.service_url = env("SPAWNERD_URL", "http://127.0.0.1:8090")
if os.environ.get("SPAWNERD_SHARED_SECRET_FILE"):
    c.RemoteKubeSpawner.shared_secret_file = os.environ["SPAWNERD_SHARED_SECRET_FILE"]
c.Spawner.start_timeout = env_int("HUB_START_TIMEOUT", 120)
c.Spawner.http_timeout = env_int("HUB_HTTP_TIMEOUT", 30)
c.Spawner.poll_interval = env_int("HUB_POLL_INTERVAL", 30)

# --- spawnerd's own identity at the hub --------------------------------------
# A token-only service: the hub neither starts nor proxies it. spawnerd's one
# call is DELETE /users/{name}/server[s/{server}] when a server stopped on its
# own, which needs delete:servers and nothing else (routes are checked with
# the proxy's own token).
services, roles = [], []


def token_service(name, env_var, description, scopes):
    """A token-only service whose token is in env_var, with a role of its own."""
    token = os.environ.get(env_var)
    if token:
        services.append({"name": name, "api_token": token})
        roles.append({"name": name, "description": description, "services": [name], "scopes": scopes})


token_service("spawnerd", "SPAWNERD_HUB_TOKEN", "spawnerd: tell the hub a server stopped", ["delete:servers"])
# Demo only: what hack/hub-stop-servers.py needs to stop every server on Ctrl-C.
token_service("demo-admin", "DEMO_HUB_ADMIN_TOKEN", "demo: list users and stop their servers",
              ["list:users", "read:servers", "delete:servers"])
c.JupyterHub.services = services
c.JupyterHub.load_roles = roles
