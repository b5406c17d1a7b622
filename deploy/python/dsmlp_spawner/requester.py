"""Who asked the hub for a start or a stop, for spawnerd's session history.

JupyterHub hands a spawner the request handler of a spawn (``Spawner.handler``)
but not of a stop. A stop asked for through the hub's API or pages goes through
``BaseHandler.stop_single_user``, which starts the stop as an asyncio task: a
context variable set around that call reaches ``Spawner.stop()`` inside the
task. Stops without a request (hub shutdown, a failed spawn's cleanup) leave
it unset, and count as the hub's own.
"""

import contextvars
import functools

# The hub user or service whose request is being served, while a stop it
# asked for starts.
_current = contextvars.ContextVar("dsmlp_spawner_requester", default=None)

# Kinds spawnerd records (history.ActorKind).
USER, ADMIN, CULLER, SERVICE, HUB = "user", "admin", "culler", "service", "hub"


def install():
    """install wraps the hub's stop_single_user once, so stop() learns its requester."""
    try:
        from jupyterhub.handlers.base import BaseHandler
    except ImportError:  # not inside a hub (tests of the class alone)
        return
    original = BaseHandler.stop_single_user
    if getattr(original, "_dsmlp_requester", False):
        return

    @functools.wraps(original)
    async def stop_single_user(self, user, server_name=""):
        token = _current.set(getattr(self, "current_user", None))
        try:
            return await original(self, user, server_name)
        finally:
            _current.reset(token)

    stop_single_user._dsmlp_requester = True
    BaseHandler.stop_single_user = stop_single_user


def current():
    """current is the requester of the stop being served, or None."""
    return _current.get()


def describe(who, owner, culler_names):
    """describe turns a hub user or service into spawnerd's requester: {"kind", "name"}.

    ``owner`` is the name of the user whose server it is; ``culler_names`` the
    service names that count as the idle culler.
    """
    if who is None:
        return {"kind": HUB}
    name = getattr(who, "name", None)
    if not isinstance(name, str) or not name:
        return {"kind": HUB}
    if _is_service(who):
        return {"kind": CULLER if name in culler_names else SERVICE, "name": name}
    if name == owner:
        return {"kind": USER, "name": name}
    # Only admins (or users granted rights on others' servers) get here.
    return {"kind": ADMIN, "name": name}


def _is_service(who):
    kind = getattr(who, "kind", None)
    if kind in ("service", "user"):
        return kind == "service"
    try:
        from jupyterhub import orm
    except ImportError:
        return False
    return isinstance(who, orm.Service)
