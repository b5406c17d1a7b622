// Package hubapi is the HTTP API the hub-side spawner class calls: start,
// poll, stop and progress of a user's servers, the profile list, and the
// admin views, behind HS256 JWT authentication.
package hubapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/spawner"
)

// Servers runs and reports servers; *lifecycle.Manager implements it.
type Servers interface {
	Start(ctx context.Context, req spawner.Request, by history.Actor) (*lifecycle.Server, error)
	Server(key lifecycle.Key, hint lifecycle.Hint) *lifecycle.Server
	ServerWithEvents(key lifecycle.Key, max int) *lifecycle.Server
	Stop(ctx context.Context, key lifecycle.Key, hint lifecycle.Hint, now bool, wait time.Duration, by history.Actor) (bool, error)
	DeleteForever(ctx context.Context, key lifecycle.Key, saved lifecycle.SavedState) (*lifecycle.StorageDeletion, error)
	Progress(ctx context.Context, key lifecycle.Key, fn func(lifecycle.Event) error) error
	List() []*lifecycle.Server
}

// Options configures the API.
type Options struct {
	Servers  Servers
	Auth     *Authenticator
	Profiles func() []spawner.Profile
	// Ready reports whether the informer caches have synced (/readyz).
	Ready func() bool
	// StopWait bounds how long DELETE waits for the pod to go before answering 202.
	StopWait time.Duration
	// BodyLimit caps request bodies, e.g. "1M".
	BodyLimit string
	// Reservations is the GPU reservation engine's admin side; nil when the
	// engine is off (its routes then answer 404).
	Reservations Reservations
	// History is the session history; nil turns its routes into 404s.
	History History
	// Location renders times in sentences (the reservation engine's zone).
	Location *time.Location
	// Now defaults to time.Now.
	Now      func() time.Time
	Logger   *zap.Logger
	Registry *prometheus.Registry
}

// API is the HTTP handler: echo's routes, with the hub's poll answered in
// front of them (see pollPath).
type API struct {
	*echo.Echo
	poll *pollPath
}

// ServeHTTP answers a plain poll on the fast path and every other request
// through echo.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.poll != nil && a.poll.serve(w, r) {
		return
	}
	a.Echo.ServeHTTP(w, r)
}

// New returns the HTTP handler with every route.
func New(opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.StopWait == 0 {
		opts.StopWait = 10 * time.Second
	}
	if opts.BodyLimit == "" {
		opts.BodyLimit = "1M"
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	h := &handlers{opts: opts, log: opts.Logger}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(opts.Logger)
	// Every answer carries X-Request-Id; an internal error's body gives it
	// too, and the log line with the details has it.
	reqs := newRequestMetrics(opts.Registry)
	e.Use(middleware.RequestID(), middleware.Recover(), requestMetrics(reqs), middleware.BodyLimit(opts.BodyLimit))

	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.GET("/readyz", func(c echo.Context) error {
		if opts.Ready != nil && !opts.Ready() {
			return &apiError{status: http.StatusServiceUnavailable, msg: "informer caches not synced yet"}
		}
		return c.String(http.StatusOK, "ok")
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})))

	api := e.Group("/api/v1", opts.Auth.middleware)
	api.GET("/profiles", h.profiles)
	poll := newPollPath(opts, reqs)
	if poll != nil {
		poll.batched = newBatchedPolls(opts.Registry)
		api.POST(strings.TrimPrefix(pollsPath, "/api/v1"), poll.batch)
	}
	for _, p := range []string{"/users/:user/server", "/users/:user/servers/:server"} {
		api.POST(p, h.start)
		api.GET(p, h.poll)
		api.DELETE(p, h.stop)
		api.GET(p+"/progress", h.progress)
		api.DELETE(p+"/storage", h.deleteForever)
	}
	admin := api.Group("/servers", requireAdmin)
	admin.GET("", h.list)
	admin.GET("/:user", h.adminServer)
	admin.GET("/:user/:server", h.adminServer)
	h.routeReservations(api)
	h.routeSessions(api)
	return &API{Echo: e, poll: poll}
}

type handlers struct {
	opts Options
	log  *zap.Logger
}

// StartRequest is the body of a start: what the hub's spawner knows.
type StartRequest struct {
	// Env is the hub's get_env() for this spawn.
	Env map[string]string `json:"env"`
	// UserOptions are the user's choices (profile and options).
	UserOptions map[string]any `json:"user_options"`
	// APIToken is the server's hub API token (also in Env as JUPYTERHUB_API_TOKEN).
	APIToken     string `json:"api_token"`
	UserID       int    `json:"user_id"`
	HubVersion   string `json:"hub_version"`
	StartTimeout int    `json:"start_timeout"`
	// State is what the hub saved of the server that the start reads back.
	State *StartState `json:"state"`
	// RequestedBy is who asked the hub for the start, when the hub class
	// knows: the user, an admin, a service.
	RequestedBy *history.Actor `json:"requested_by"`
}

// StartState is the part of the hub's saved state a start uses.
type StartState struct {
	// PVCName is the saved pvc_name: with remember_pvc_name the start
	// uses it instead of pvc_name_template's expansion.
	PVCName string `json:"pvc_name"`
}

// ProfilesResponse is the profile list for the hub's options form.
type ProfilesResponse struct {
	Profiles []spawner.Profile `json:"profiles"`
}

// ServerList is the admin list of servers.
type ServerList struct {
	Servers []*lifecycle.Server `json:"servers"`
}

// key reads user and server from the path and checks that the token is for that user.
func (h *handlers) key(c echo.Context) (lifecycle.Key, error) {
	user, err := pathParam(c, "user")
	if err != nil {
		return lifecycle.Key{}, err
	}
	server := ""
	if strings.Contains(c.Path(), "/servers/:server") {
		if server, err = pathParam(c, "server"); err != nil {
			return lifecycle.Key{}, err
		}
		if server == "" {
			return lifecycle.Key{}, &apiError{status: http.StatusBadRequest, msg: "server name must not be empty; use /server for the default server", field: "server"}
		}
	}
	if user == "" {
		return lifecycle.Key{}, &apiError{status: http.StatusBadRequest, msg: "user name must not be empty", field: "user"}
	}
	if err := checkOwner(claimsOf(c), user, "user"); err != nil {
		return lifecycle.Key{}, err
	}
	return lifecycle.Key{User: user, Server: server}, nil
}

// pathParam returns a path segment unescaped exactly once (echo matches on
// the raw path when the request has one).
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", &apiError{status: http.StatusBadRequest, msg: "bad escape in path", field: name}
	}
	return u, nil
}

func (h *handlers) profiles(c echo.Context) error {
	var ps []spawner.Profile
	if h.opts.Profiles != nil {
		ps = h.opts.Profiles()
	}
	if ps == nil {
		ps = []spawner.Profile{}
	}
	return c.JSON(http.StatusOK, ProfilesResponse{Profiles: ps})
}

func (h *handlers) start(c echo.Context) error {
	key, err := h.key(c)
	if err != nil {
		return err
	}
	var body StartRequest
	if err := decodeStrict(c.Request().Body, &body); err != nil {
		return err
	}
	env := body.Env
	if env == nil {
		env = map[string]string{}
	}
	if body.APIToken != "" && env["JUPYTERHUB_API_TOKEN"] == "" {
		env["JUPYTERHUB_API_TOKEN"] = body.APIToken
	}
	if body.StartTimeout < 0 {
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("start_timeout must not be negative, got %d", body.StartTimeout), field: "start_timeout"}
	}
	req := spawner.Request{User: key.User, Server: key.Server, UserID: body.UserID, Env: env, UserOptions: body.UserOptions, StartTimeout: body.StartTimeout}
	if body.State != nil {
		if err := checkPVCName(body.State.PVCName, "state.pvc_name"); err != nil {
			return err
		}
		req.SavedPVCName = body.State.PVCName
	}
	by, err := checkActor(body.RequestedBy, "requested_by")
	if err != nil {
		return err
	}
	srv, err := h.opts.Servers.Start(c.Request().Context(), req, by)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if srv.Status == lifecycle.StatusRunning {
		status = http.StatusOK
	}
	return c.JSON(status, srv)
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields, keys in another case than the field's, duplicate keys and
// trailing data, each with an error that names the field.
func decodeStrict(r io.Reader, v any) error {
	data, err := io.ReadAll(r)
	if err != nil {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return he
		}
		return &apiError{status: http.StatusBadRequest, msg: "reading body: " + err.Error(), field: "body"}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	// One pass of the API server's strict decoder does both jobs for a body
	// it accepts: it refuses what encoding/json lets through, and the one
	// difference in what it stores, whole numbers in untyped fields as int64
	// where encoding/json gives float64 (what the spawner expects of JSON),
	// is undone. A body it refuses is decoded again as below, so that every
	// refusal reads the same. v must be a zero value.
	strict, err := kjson.UnmarshalStrict(data, v)
	if err == nil && len(strict) == 0 && floatWhole(reflect.ValueOf(v), bytes.Contains(data, []byte("-0"))) {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	return refuse(data, v)
}

// refuse is decodeStrict's refusal: encoding/json first, then the strict
// decoder, each error told as the field it names.
func refuse(data []byte, v any) error {
	// encoding/json first: it refuses trailing data and wrong types with
	// typed errors, and gives numbers in untyped fields as float64, which
	// the spawner expects of JSON.
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field == "":
			return &apiError{status: http.StatusBadRequest, msg: "the body must be a JSON object, not " + te.Value, field: "body"}
		case errors.As(err, &te):
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s must be %s, not %s", te.Field, te.Type, te.Value), field: te.Field}
		case errors.As(err, &se):
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se), field: "body"}
		}
		return &apiError{status: http.StatusBadRequest, msg: "malformed JSON: " + err.Error(), field: "body"}
	}
	// Then the API server's strict decoder, for what encoding/json lets
	// through: unknown fields, keys matched case-insensitively ("ENV" for
	// env) and duplicate keys. It decodes into a throwaway value, as its
	// numbers in untyped fields are int64.
	strict, err := kjson.UnmarshalStrict(data, reflect.New(reflect.TypeOf(v).Elem()).Interface())
	if err != nil {
		return &apiError{status: http.StatusBadRequest, msg: "malformed JSON: " + err.Error(), field: "body"}
	}
	if len(strict) > 0 {
		field := "body"
		var fp interface{ FieldPath() string }
		if errors.As(strict[0], &fp) && fp.FieldPath() != "" {
			field = fp.FieldPath()
		}
		msg := strict[0].Error()
		if len(strict) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(strict)-1)
		}
		return &apiError{status: http.StatusBadRequest, msg: msg + "; field names are case-sensitive and may appear once", field: field}
	}
	return nil
}

// floatWhole turns the int64s sigs.k8s.io/json leaves for whole numbers in
// v's untyped (any) values into the float64s encoding/json gives. It
// reports false when it cannot match encoding/json: a zero that may have
// been written -0 (negZero: the body holds "-0"), or an untyped value it
// cannot reach in place.
func floatWhole(v reflect.Value, negZero bool) bool {
	switch v.Kind() {
	case reflect.Pointer:
		return v.IsNil() || floatWhole(v.Elem(), negZero)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !floatWhole(v.Field(i), negZero) {
				return false
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if !floatWhole(v.Index(i), negZero) {
				return false
			}
		}
	case reflect.Map:
		switch v.Type().Elem().Kind() {
		case reflect.Interface:
			for it := v.MapRange(); it.Next(); {
				x, changed, ok := floatAny(it.Value().Interface(), negZero)
				if !ok {
					return false
				}
				if changed {
					v.SetMapIndex(it.Key(), reflect.ValueOf(x))
				}
			}
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		default:
			return false // values not settable in place; none of the API's types has them
		}
	case reflect.Interface:
		if v.IsNil() {
			return true
		}
		x, changed, ok := floatAny(v.Interface(), negZero)
		if ok && changed {
			v.Set(reflect.ValueOf(x))
		}
		return ok
	}
	return true
}

// floatAny is floatWhole for a generic JSON value: maps and lists are
// changed in place; a number is returned changed.
func floatAny(x any, negZero bool) (out any, changed, ok bool) {
	switch t := x.(type) {
	case int64:
		if t == 0 && negZero {
			return nil, false, false
		}
		return float64(t), true, true
	case map[string]any:
		for k, e := range t {
			y, changed, ok := floatAny(e, negZero)
			if !ok {
				return nil, false, false
			}
			if changed {
				t[k] = y
			}
		}
	case []any:
		for i, e := range t {
			y, changed, ok := floatAny(e, negZero)
			if !ok {
				return nil, false, false
			}
			if changed {
				t[i] = y
			}
		}
	}
	return x, false, true
}

func (h *handlers) poll(c echo.Context) error {
	key, err := h.key(c)
	if err != nil {
		return err
	}
	hint, err := hintOf(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.opts.Servers.Server(key, hint))
}

// maxHintLen bounds a hint value: a Kubernetes name is at most 253 bytes.
const maxHintLen = 253

// hintOf reads the hub's saved state (pod_name, namespace, pod_uid) that
// the hub class sends with poll and stop, as query parameters.
func hintOf(c echo.Context) (lifecycle.Hint, error) {
	h := lifecycle.Hint{Pod: c.QueryParam("pod_name"), Namespace: c.QueryParam("namespace"), UID: types.UID(c.QueryParam("pod_uid"))}
	if err := checkHint(h); err != nil {
		return lifecycle.Hint{}, err
	}
	return h, nil
}

// checkHint refuses a hint value longer than maxHintLen, naming its field.
func checkHint(h lifecycle.Hint) *apiError {
	for _, f := range [...]struct{ name, value string }{{"pod_name", h.Pod}, {"namespace", h.Namespace}, {"pod_uid", string(h.UID)}} {
		if len(f.value) > maxHintLen {
			return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s is longer than %d bytes", f.name, maxHintLen), field: f.name}
		}
	}
	return nil
}

// checkOwner refuses (403, naming field) a token that is neither the
// user's nor an admin's.
func checkOwner(cl *Claims, user, field string) *apiError {
	if cl != nil && !cl.Admin && cl.Subject != user {
		return &apiError{status: http.StatusForbidden, msg: fmt.Sprintf("the token is for user %q, not %q", cl.Subject, user), field: field}
	}
	return nil
}

func (h *handlers) stop(c echo.Context) error {
	key, err := h.key(c)
	if err != nil {
		return err
	}
	now := false
	if v := c.QueryParam("now"); v != "" {
		if now, err = strconv.ParseBool(v); err != nil {
			return &apiError{status: http.StatusBadRequest, msg: "now must be true or false", field: "now"}
		}
	}
	// The hub class sends the wait it can afford below its request timeout;
	// --stop-wait stays the ceiling.
	wait := h.opts.StopWait
	if v := c.QueryParam("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return &apiError{status: http.StatusBadRequest, msg: "wait must be a non-negative duration such as 5s", field: "wait"}
		}
		wait = min(wait, d)
	}
	hint, err := hintOf(c)
	if err != nil {
		return err
	}
	var by *history.Actor
	if k := c.QueryParam("by"); k != "" || c.QueryParam("by_name") != "" {
		by = &history.Actor{Kind: history.ActorKind(k), Name: c.QueryParam("by_name")}
	}
	actor, err := checkActor(by, "by")
	if err != nil {
		return err
	}
	gone, err := h.opts.Servers.Stop(c.Request().Context(), key, hint, now, wait, actor)
	if err != nil {
		return err
	}
	if !gone {
		return c.JSON(http.StatusAccepted, h.opts.Servers.Server(key, hint))
	}
	return c.NoContent(http.StatusNoContent)
}

var upgrader = websocket.Upgrader{
	// The hub's server process is the only client; it sends no Origin.
	CheckOrigin: func(*http.Request) bool { return true },
}

// progress streams the spawn's events over a WebSocket, replayed from the
// first, ending with a ready or failed event.
func (h *handlers) progress(c echo.Context) error {
	key, err := h.key(c)
	if err != nil {
		return err
	}
	if !websocket.IsWebSocketUpgrade(c.Request()) {
		return &apiError{status: http.StatusBadRequest, msg: "progress is a WebSocket: send a GET with Connection: Upgrade and Upgrade: websocket", field: "Upgrade"}
	}
	srv := h.opts.Servers.Server(key, lifecycle.Hint{})
	// The stream outlives the server's read and write timeouts: lift them
	// for this connection (the upgrader clears the socket's deadlines as
	// well); the pings below and the per-message write deadline bound it.
	rc := http.NewResponseController(c.Response())
	if err := rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("clearing the write deadline of the progress stream: %w", err)
	}
	if err := rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("clearing the read deadline of the progress stream: %w", err)
	}
	ws, err := upgrader.Upgrade(c.Response(), c.Request(), nil)
	if err != nil {
		return nil // the upgrader has answered already
	}
	defer ws.Close()
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	go func() { // notice a client that went away
		for {
			if _, _, err := ws.NextReader(); err != nil {
				cancel()
				return
			}
		}
	}()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-ping.C:
				_ = ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(5*time.Second))
			}
		}
	}()
	send := func(e lifecycle.Event) error {
		_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return ws.WriteJSON(e)
	}
	err = h.opts.Servers.Progress(ctx, key, send)
	if errors.Is(err, lifecycle.ErrNotFound) {
		// No spawn in this process's memory (e.g. after a restart): report what the cache says.
		full := 100
		switch {
		case srv.Status == lifecycle.StatusRunning && srv.URL != nil:
			err = send(lifecycle.Event{Progress: &full, Ready: true, URL: *srv.URL, Message: "Server ready at " + *srv.URL})
		default:
			err = send(lifecycle.Event{Progress: &full, Failed: true, Message: "no spawn in progress for this server (status " + srv.Status + ")"})
		}
	}
	if err != nil && ctx.Err() == nil {
		h.log.Info("progress stream ended", zap.String("user", key.User), zap.String("server", key.Server), zap.Error(err))
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return nil
}

func (h *handlers) list(c echo.Context) error {
	servers := h.opts.Servers.List()
	if servers == nil {
		servers = []*lifecycle.Server{}
	}
	return c.JSON(http.StatusOK, ServerList{Servers: servers})
}

// maxActorName bounds a requester's name: hub user and service names are short.
const maxActorName = 255

// checkActor validates who asked for a start or stop; nil is the hub
// itself (an old hub class, or a request the class could not attribute).
func checkActor(a *history.Actor, field string) (history.Actor, error) {
	if a == nil {
		return history.Actor{Kind: history.ActorHub}, nil
	}
	switch a.Kind {
	case history.ActorUser, history.ActorAdmin, history.ActorCuller, history.ActorService:
		if a.Name == "" {
			return history.Actor{}, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s names no one: a %s requester needs a name", field, a.Kind), field: field + "_name"}
		}
	case history.ActorHub:
	default:
		return history.Actor{}, &apiError{status: http.StatusBadRequest,
			msg: fmt.Sprintf("%s kind %q is none of user, admin, culler, service, hub", field, a.Kind), field: field}
	}
	if len(a.Name) > maxActorName {
		return history.Actor{}, &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s name is longer than %d bytes", field, maxActorName), field: field + "_name"}
	}
	return *a, nil
}

func (h *handlers) adminServer(c echo.Context) error {
	user, err := pathParam(c, "user")
	if err != nil {
		return err
	}
	server := ""
	if c.ParamNames() != nil && len(c.ParamNames()) > 1 {
		if server, err = pathParam(c, "server"); err != nil {
			return err
		}
	}
	srv := h.opts.Servers.ServerWithEvents(lifecycle.Key{User: user, Server: server}, 20)
	if srv.Status == lifecycle.StatusAbsent {
		what := "no default server"
		if server != "" {
			what = fmt.Sprintf("no server %q", server)
		}
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("%s for user %q", what, user), field: "server"}
	}
	return c.JSON(http.StatusOK, srv)
}

// newRequestMetrics registers spawner_http_request_duration_seconds.
func newRequestMetrics(reg *prometheus.Registry) *prometheus.HistogramVec {
	reqs := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "spawner_http_request_duration_seconds", Help: "API requests by route, method and status.",
		// Fine below a millisecond, where polls answer from the cache; up
		// to a minute for stops that wait.
		Buckets: []float64{5e-6, 10e-6, 15e-6, 20e-6, 30e-6, 40e-6, 50e-6, 75e-6, 100e-6, 150e-6, 200e-6, 300e-6, 500e-6,
			0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"route", "method", "code"})
	reg.MustRegister(reqs)
	return reqs
}

func requestMetrics(reqs *prometheus.HistogramVec) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			code := c.Response().Status
			if err != nil {
				code, _ = toStatus(err)
			}
			reqs.WithLabelValues(c.Path(), c.Request().Method, strconv.Itoa(code)).Observe(time.Since(start).Seconds())
			return err
		}
	}
}
