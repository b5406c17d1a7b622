"""RemoteKubeSpawner: the hub-side Spawner that forwards start/poll/stop/progress to spawnerd."""

import asyncio
import inspect
import json
from urllib.parse import urlsplit

import jupyterhub
from jupyterhub.spawner import Spawner
from tornado import web
from traitlets import Float, Integer, List, Unicode, default

from . import batch, form, requester
from .auth import SecretError, TokenSigner, read_secret
from .client import AuthError, Client, MisroutedError, ServiceError, TransportError
from .events import EventLog

# Server model statuses, as spawnerd reports them.
PENDING, RUNNING, STOPPED, ABSENT = "pending", "running", "stopped", "absent"

# State keys that survive clear_state(), as in KubeSpawner: the next spawn
# of the same server keeps its namespace and volume.
_KEPT_STATE = ("namespace", "pvc_name")

# Stops learn who asked for them through the hub's stop_single_user.
requester.install()


class SpawnFailed(RuntimeError):
    """SpawnFailed is raised by start() when spawnerd reports that the spawn failed.

    The hub shows ``jupyterhub_message`` to the user.
    """

    def __init__(self, message):
        super().__init__(message)
        self.jupyterhub_message = message


def _exit_code(model):
    code = model.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return 1


class RemoteKubeSpawner(Spawner):
    """RemoteKubeSpawner starts notebook servers through the spawnerd service.

    spawnerd creates the pods, PVCs and services (KubeSpawner-compatible);
    this class only carries the hub's side of the Spawner contract over HTTP,
    authenticating every call with a short-lived JWT signed with a shared secret.
    """

    service_url = Unicode(
        "http://127.0.0.1:8090",
        help="Base URL of spawnerd, e.g. http://spawnerd.jhub.svc:8090.",
    ).tag(config=True)

    shared_secret_file = Unicode(
        "",
        help="""File holding the secret shared with spawnerd (trailing whitespace ignored).
        Takes precedence over shared_secret_env.""",
    ).tag(config=True)

    shared_secret_env = Unicode(
        "SPAWNERD_SHARED_SECRET",
        help="Environment variable holding the shared secret when shared_secret_file is unset.",
    ).tag(config=True)

    request_timeout = Float(
        10,
        help="Seconds to wait for spawnerd to connect and answer one request.",
    ).tag(config=True)

    http_max_clients = Integer(
        64,
        help="""Requests to spawnerd in flight at once from this hub; more wait their turn, up to
        http_queue_timeout, and request_timeout starts once a request is sent. They go through a
        client of their own, not the hub's shared one (10 at once, also used for the proxy), so
        a burst of spawns neither waits behind the hub's proxy calls nor delays them.""",
    ).tag(config=True)

    http_queue_timeout = Float(
        60,
        help="""Seconds a request to spawnerd may wait for one of the http_max_clients slots
        before it fails. Not counted in request_timeout: a burst of starts larger than the slots
        waits its turn instead of failing, while a spawnerd that stops answering still fails
        what is queued (each request in flight ends after request_timeout).""",
    ).tag(config=True)

    stop_wait = Float(
        help="""Seconds spawnerd may wait for a stopping pod before answering 202 (sent as
        DELETE ?wait=; spawnerd clamps it to its --stop-wait). Must be below
        request_timeout, so a slow stop is never taken for an unreachable spawnerd.
        Default: half of request_timeout.""",
    ).tag(config=True)

    progress_ping_interval = Float(
        15,
        help="""Seconds between pings on the progress WebSocket; a spawnerd that does not
        answer within progress_ping_interval + request_timeout is taken as gone and
        start() falls back to polling. 0 disables the pings.""",
    ).tag(config=True)

    poll_retry = Float(
        0.5,
        help="""Seconds between status checks when start() falls back from the
        progress WebSocket to polling, and while stop() waits for a server to go.""",
    ).tag(config=True)

    stop_timeout = Float(
        60,
        help="Seconds stop() waits for spawnerd to report the server gone before giving up.",
    ).tag(config=True)

    reservation_wait_timeout = Float(
        2400,
        help="""Seconds the hub lets a start run when spawnerd may keep it waiting on a
        GPU reservation (a booking opening soon, an on-demand lease being retried).
        spawnerd still ends an ordinary start after start_timeout, and fails at once
        a GPU hold that needs a fix; this only keeps the hub from giving up first.
        Match spawnerd's reservation_wait_timeout. 0 keeps start_timeout.""",
    ).tag(config=True)

    poll_batch_window = Float(
        0.05,
        help="""Seconds a poll waits for other servers' polls to share one request to spawnerd
        (POST /api/v1/polls). The hub polls each server on its own timer, and every server at
        once when it starts; a batch costs the hub and spawnerd one request instead of one per
        server. 0 sends each poll on its own (GET), as before.""",
    ).tag(config=True)

    poll_batch_size = Integer(
        256,
        help="Most polls in one batched request (1 to 1000, spawnerd's limit); a full batch goes at once.",
    ).tag(config=True)

    culler_service_names = List(
        Unicode(),
        ["idle-culler", "jupyterhub-idle-culler", "cull-idle"],
        help="""Names of hub services whose stops are the idle culler's. spawnerd's session
        history records a stop by one of them as "culler", by any other service as "service".""",
    ).tag(config=True)

    @default("stop_wait")
    def _stop_wait_default(self):
        return self.request_timeout / 2

    @default("env_keep")
    def _env_keep_default(self):
        # The hub's environment must not leak into notebook pods.
        return []

    @default("ip")
    def _ip_default(self):
        return "0.0.0.0"

    @default("port")
    def _port_default(self):
        return 8888

    @default("options_form")
    def _options_form_default(self):
        # A callable: the hub awaits it each time it shows the spawn page, so the
        # form always reflects spawnerd's current profiles.
        return self._render_options_form

    @default("options_from_form")
    def _options_from_form_default(self):
        return form.options_from_form

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._remote_state = {}
        self._url = None
        self._requested = False
        self._events = EventLog()
        self._start_task = None
        self._ordinary_start_timeout = None
        if not 0 < self.stop_wait < self.request_timeout:
            # Refused at start-up: with stop_wait >= request_timeout a slow
            # stop would read as "cannot reach spawnerd" and be retried.
            raise ValueError(
                f"RemoteKubeSpawner.request_timeout ({self.request_timeout:g} s) must be greater "
                f"than RemoteKubeSpawner.stop_wait ({self.stop_wait:g} s), and stop_wait above 0"
            )
        if self.http_max_clients < 1:
            raise ValueError(f"RemoteKubeSpawner.http_max_clients must be at least 1, got {self.http_max_clients}")
        if self.http_queue_timeout <= 0:
            raise ValueError(f"RemoteKubeSpawner.http_queue_timeout must be above 0, got {self.http_queue_timeout:g}")
        if not 1 <= self.poll_batch_size <= 1000:
            raise ValueError(f"RemoteKubeSpawner.poll_batch_size must be from 1 to 1000, got {self.poll_batch_size}")
        if self.poll_batch_window < 0:
            raise ValueError(f"RemoteKubeSpawner.poll_batch_window must not be negative, got {self.poll_batch_window:g}")
        signer = TokenSigner(self._secret)
        self._client = Client(
            self.service_url,
            signer.token,
            self.request_timeout,
            ping_interval=self.progress_ping_interval or None,
            read_token_for=signer.read_token,
            max_clients=self.http_max_clients,
            queue_timeout=self.http_queue_timeout,
        )
        try:
            self._secret()
        except SecretError as err:
            self.log.error("spawnerd secret unusable: %s", err)

    def _secret(self):
        return read_secret(self.shared_secret_file, self.shared_secret_env)

    @property
    def _who(self):
        return f"user={self.user.name} server={self.name}"

    # --- state -----------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        state.update(self._remote_state)
        return state

    def load_state(self, state):
        super().load_state(state)
        # Everything spawnerd put in its state comes back, and so do
        # KubeSpawner's own keys when KubeSpawner wrote the database.
        self._remote_state = dict(state or {})

    def clear_state(self):
        super().clear_state()
        self._remote_state = {k: self._remote_state[k] for k in _KEPT_STATE if k in self._remote_state}
        self._url = None
        self._requested = False
        # A fresh log for the coming spawn; progress() readers of an earlier
        # spawn keep the log they started on.
        self._events = EventLog()

    def _update_from_model(self, model):
        state = model.get("state")
        if isinstance(state, dict):
            self._remote_state.update(state)
        url = model.get("url")
        if url:
            self._url = url

    # --- start -------------------------------------------------------------

    async def run_pre_spawn_hook(self):
        """run_pre_spawn_hook also widens the hub's start deadline for a GPU profile's waits.

        The hub awaits this hook and reads start_timeout right after it,
        before start() runs, so this is the last moment to change it. Only a
        profile spawnerd reports with a gpu_class gets reservation_wait_timeout;
        spawnerd keeps the ordinary start_timeout, which start() sends it.
        """
        if self._ordinary_start_timeout is None:
            self._ordinary_start_timeout = self.start_timeout
        self.start_timeout = self._ordinary_start_timeout
        if self.reservation_wait_timeout > self.start_timeout and await self._wants_gpu():
            self.start_timeout = int(self.reservation_wait_timeout)
        result = super().run_pre_spawn_hook()
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _wants_gpu(self):
        """_wants_gpu says whether the chosen profile (or option choice) has a gpu_class.

        When the answer is unknown (spawnerd unreachable, or one that does not
        report gpu_class) it says yes: a cut-short GPU wait loses the user's
        place, while spawnerd ends an ordinary start at start_timeout anyway.
        """
        try:
            profiles = await self._client.profiles(self.user.name)
        except (SecretError, TransportError, ServiceError) as err:
            self.log.warning(
                "spawnerd profile list failed, allowing the GPU wait %s error=%s", self._who, err
            )
            return True
        if not profiles:
            return False
        if not any("gpu_class" in p for p in profiles):
            self.log.warning(
                "spawnerd reports no gpu_class in its profiles, allowing the GPU wait %s", self._who
            )
            return True
        # The same choice of profile and option the form pre-selects, which
        # is also spawnerd's default when user_options leave one out.
        options = self.user_options or {}
        slug = form._selected_profile(profiles, options)
        chosen = next(p for p in profiles if p.get("slug") == slug)
        if chosen.get("gpu_class"):
            return True
        for name, option in (chosen.get("profile_options") or {}).items():
            pick, _ = form._selected_choice(option or {}, name, options)
            if (((option or {}).get("choices") or {}).get(pick) or {}).get("gpu_class"):
                return True
        return False

    async def start(self):
        """start asks spawnerd for the server, follows its progress and returns its URL."""
        if self._events.closed:
            self._events = EventLog()
        # Run in a task of its own, so poll() can tell a start is in flight and
        # stop() can cancel exactly this work.
        self._start_task = asyncio.ensure_future(self._start(self._events))
        return await self._start_task

    async def _start(self, events):
        try:
            return await self._request_start(events)
        finally:
            events.close()

    async def _request_start(self, events):
        # Fail with the operator's message before anything is sent, so poll() knows
        # no server was requested.
        self._secret()
        body = {
            "env": self.get_env(),
            "user_options": self.user_options or {},
            "api_token": self.api_token,
            "user_id": self.user.id,
            "hub_version": jupyterhub.__version__,
            "start_timeout": int(self._ordinary_start_timeout or self.start_timeout),
            "requested_by": self._requester(getattr(getattr(self, "handler", None), "current_user", None)),
        }
        if self._remote_state.get("pvc_name"):
            # With remember_pvc_name, spawnerd keeps the saved PVC even if
            # pvc_name_template changed since (KubeSpawner's load_state).
            body["state"] = {"pvc_name": self._remote_state["pvc_name"]}
        self._requested = True
        try:
            model = await self._client.start(self.user.name, self.name, body)
        except ServiceError as err:
            if err.status < 500:
                # Refused outright: nothing exists, so poll() may say so without asking.
                self._requested = False
            raise
        self._update_from_model(model)
        self.log.info(
            "spawnerd start requested %s pod=%s namespace=%s status=%s",
            self._who,
            self._remote_state.get("pod_name"),
            self._remote_state.get("namespace"),
            model.get("status"),
        )
        status = model.get("status")
        if status == RUNNING and model.get("url"):
            return model["url"]
        if status in (STOPPED, ABSENT):
            raise SpawnFailed(model.get("message") or "the server stopped before it was ready")
        url = await self._follow_progress(events)
        if url is None:
            url = await self._poll_until_running(events)
        await self._refresh_state()
        self._url = url
        return url

    async def _follow_progress(self, events):
        """_follow_progress relays the progress WebSocket; None means fall back to polling."""
        try:
            conn = await self._client.progress(self.user.name, self.name)
        except TransportError as err:
            self.log.warning("spawnerd progress stream unavailable, polling %s error=%s", self._who, err)
            return None
        try:
            while True:
                message = await conn.read_message()
                if message is None:
                    self.log.warning("spawnerd progress stream closed early, polling %s", self._who)
                    return None
                try:
                    event = json.loads(message)
                except ValueError:
                    self.log.warning("spawnerd sent a non-JSON progress message %s", self._who)
                    continue
                if not isinstance(event, dict):
                    continue
                events.append(event)
                if event.get("failed"):
                    raise SpawnFailed(event.get("message") or "spawn failed")
                if event.get("ready"):
                    # Without a URL in the ready event, the status model has it.
                    return event.get("url") or None
        finally:
            conn.close()

    async def _poll_until_running(self, events):
        """_poll_until_running GETs the status every poll_retry seconds until running or gone."""
        last_message = None
        while True:
            try:
                model = await self._client.status(self.user.name, self.name, self._remote_state)
            except AuthError:
                raise
            except (TransportError, ServiceError) as err:
                if isinstance(err, ServiceError) and err.status < 500:
                    raise
                self.log.warning("spawnerd status check failed, retrying %s error=%s", self._who, err)
                await asyncio.sleep(self.poll_retry)
                continue
            model = model or {"status": ABSENT}
            self._update_from_model(model)
            message = model.get("message")
            if message and message != last_message:
                last_message = message
                events.append({"message": message})
            status = model.get("status")
            if status == RUNNING and model.get("url"):
                return model["url"]
            if status in (STOPPED, ABSENT):
                raise SpawnFailed(message or "the server stopped before it was ready")
            await asyncio.sleep(self.poll_retry)

    async def _refresh_state(self):
        # Best effort: the hub saves get_state() right after start() returns, and
        # the final model may name things (e.g. the PVC) the first one did not.
        try:
            model = await self._client.status(self.user.name, self.name, self._remote_state)
        except (TransportError, ServiceError) as err:
            self.log.warning("spawnerd state refresh failed %s error=%s", self._who, err)
            return
        if model:
            self._update_from_model(model)

    # --- poll ----------------------------------------------------------------

    async def poll(self):
        """poll maps spawnerd's status to the hub's: None while pending or running, else an exit code.

        It never raises: at hub startup an exception would count as "dead" and
        the hub would forget a running server.
        """
        if self._start_task is not None and not self._start_task.done():
            return None
        if not self._requested and "pod_name" not in self._remote_state:
            return 0
        try:
            model = await batch.poll_status(
                self._client,
                self._secret,
                self.poll_batch_window,
                self.poll_batch_size,
                self.user.name,
                self.name,
                self._remote_state,
            )
        except (SecretError, AuthError) as err:
            self.log.error("spawnerd poll refused %s error=%s", self._who, err)
            return None
        except MisroutedError as err:
            # Not spawnerd's answer: the server may well be running, and
            # returning an exit code here would make the hub forget it.
            self.log.error("spawnerd poll misrouted, keeping the server %s error=%s", self._who, err)
            return None
        except (TransportError, ServiceError) as err:
            self.log.warning("spawnerd poll failed %s error=%s", self._who, err)
            return None
        except Exception:
            self.log.exception("spawnerd poll crashed %s", self._who)
            return None
        if model is None:
            model = {"status": ABSENT}
        status = model.get("status")
        if status in (PENDING, RUNNING):
            self._update_from_model(model)
            return None
        if status == STOPPED:
            return _exit_code(model)
        if status == ABSENT:
            return 1 if self._remote_state.get("pod_name") else 0
        self.log.warning("spawnerd reported an unknown status %s status=%s", self._who, status)
        return None

    # --- stop ----------------------------------------------------------------

    def _requester(self, who):
        """_requester says who asked for a start or stop, as spawnerd records it."""
        return requester.describe(who, self.user.name, set(self.culler_service_names))

    async def stop(self, now=False):
        """stop asks spawnerd to delete the server and returns once it is gone."""
        self._cancel_start()
        by = self._requester(requester.current())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_timeout
        misrouted = 0
        while True:
            try:
                code = await self._client.delete(
                    self.user.name, self.name, now, wait=self.stop_wait, hint=self._remote_state, by=by
                )
                break
            except (SecretError, AuthError):
                raise
            except MisroutedError as err:
                # The pod may still run, so this is no success. JupyterHub 3
                # drops the server once stop() ends, raised or not, so keep
                # the stop pending (the hub answers 202) until stop_timeout.
                misrouted += 1
                if misrouted == 1 or loop.time() + self.poll_retry > deadline:
                    self.log.error(
                        "spawnerd stop misrouted, the pod may still run %s attempts=%d error=%s",
                        self._who,
                        misrouted,
                        err,
                    )
                if loop.time() + self.poll_retry > deadline:
                    raise
                await asyncio.sleep(self.poll_retry)
            except (TransportError, ServiceError) as err:
                retryable = isinstance(err, TransportError) or err.status >= 500
                if not retryable or loop.time() + self.poll_retry > deadline:
                    raise
                self.log.warning("spawnerd stop failed, retrying %s error=%s", self._who, err)
                await asyncio.sleep(self.poll_retry)
        if code == 202:
            await self._wait_gone(deadline)
        self._url = None
        self.log.info(
            "spawnerd server stopped %s pod=%s by=%s:%s",
            self._who,
            self._remote_state.get("pod_name"),
            by["kind"],
            by.get("name", ""),
        )

    def _cancel_start(self):
        # JupyterHub 3.x gives up on a slow start() without cancelling it; a
        # start still following the progress stream must not outlive the stop.
        task = self._start_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()

    async def _wait_gone(self, deadline):
        loop = asyncio.get_running_loop()
        while True:
            try:
                model = await self._client.status(self.user.name, self.name, self._remote_state)
                if model is None or model.get("status") in (STOPPED, ABSENT):
                    return
            except AuthError:
                raise
            except (TransportError, ServiceError) as err:
                self.log.warning("spawnerd status check failed, retrying %s error=%s", self._who, err)
            if loop.time() + self.poll_retry > deadline:
                raise TimeoutError(
                    f"spawnerd did not stop {self._log_name} within {self.stop_timeout:g} s"
                )
            await asyncio.sleep(self.poll_retry)

    # --- delete_forever ------------------------------------------------------

    async def delete_forever(self):
        """delete_forever asks spawnerd to delete the server's PVC, as KubeSpawner's delete_forever does.

        The hub calls it once, when a user or a named server is deleted, after
        the server stopped. spawnerd applies delete_pvc, remember_pvc_name and
        the shared-PVC rule for named servers; the saved state's pvc_name and
        namespace (kept by clear_state) name the PVC. Transient failures, and
        a server spawnerd still sees terminating, are retried for up to
        stop_timeout seconds; the hub logs what is raised after that.
        """
        state = {k: self._remote_state[k] for k in _KEPT_STATE if self._remote_state.get(k)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_timeout
        while True:
            try:
                result = await self._client.delete_forever(self.user.name, self.name, state, self.user.id)
                break
            except (SecretError, AuthError):
                raise
            except (TransportError, ServiceError) as err:
                retryable = isinstance(err, TransportError) or err.status >= 500 or err.status == 409
                if not retryable or loop.time() + self.poll_retry > deadline:
                    raise
                self.log.warning("spawnerd delete forever failed, retrying %s error=%s", self._who, err)
                await asyncio.sleep(self.poll_retry)
        self.log.info(
            "spawnerd deleted server forever %s pvc=%s namespace=%s result=%s reason=%s",
            self._who,
            result.get("pvc"),
            result.get("namespace"),
            result.get("result"),
            result.get("reason", ""),
        )

    # --- progress, url, form -------------------------------------------------

    async def progress(self):
        """progress replays this spawn's events from the first, then follows new ones.

        Events pass through as spawnerd sent them. It never raises.
        """
        events = self._events
        try:
            async for event in events.follow():
                yield event
        except Exception:
            self.log.exception("spawnerd progress relay crashed %s", self._who)

    async def get_url(self):
        """get_url returns spawnerd's URL for the server, with the hub's prefix as the hub stores it."""
        url = self._url
        if url is None:
            try:
                model = await self._client.status(self.user.name, self.name, self._remote_state)
            except (SecretError, TransportError, ServiceError) as err:
                self.log.warning("spawnerd url lookup failed %s error=%s", self._who, err)
                model = None
            if model:
                self._update_from_model(model)
                url = self._url
        if url is None:
            return self.server.url if self.server else None
        if not self.server:
            return url
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}{self.server.base_url}"

    async def _render_options_form(self, spawner=None):
        try:
            profiles = await self._client.profiles(self.user.name)
        except (SecretError, TransportError, ServiceError) as err:
            self.log.error("spawnerd profile list failed %s error=%s", self._who, err)
            raise web.HTTPError(503, "The spawner service did not return the server options.") from err
        return form.render_form(profiles, self.user_options)
