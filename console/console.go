// Package console is spawnerd's web console for hub admins and its status
// page for every hub user, served as a JupyterHub service behind the hub's
// OAuth login.
package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/lifecycle"
	"github.com/dsmlp/spawner/reservation"
)

// Servers reports the hub's servers; *lifecycle.Manager implements it.
// List includes recently stopped servers.
type Servers interface {
	List() []*lifecycle.Server
	ServerWithEvents(key lifecycle.Key, max int) *lifecycle.Server
}

// History is the session history; *history.Store implements it.
type History interface {
	List(ctx context.Context, f history.Filter, p history.Page) (history.SessionPage, error)
	Get(ctx context.Context, uid string) (history.Session, error)
	Events(ctx context.Context, uid string) ([]history.Event, error)
	// Last returns history.ErrNotFound when the server has no session.
	Last(ctx context.Context, user, server string) (history.Session, error)
	EndedByDay(ctx context.Context, f history.Filter, loc *time.Location) ([]history.DayCount, error)
}

// Reservations is the GPU reservation engine's admin side;
// *gpucontroller.Controller implements it.
type Reservations interface {
	Reservations() []reservation.Reservation
	Classes(horizon time.Duration) ([]reservation.ClassStatus, error)
	SetPaused(ctx context.Context, class string, paused bool, reason string) error
	Now() time.Time
}

// Defaults of Options.
const (
	DefaultPrefix       = "/services/spawnerd/"
	DefaultHubPrefix    = "/hub/"
	DefaultClientID     = "service-spawnerd"
	DefaultConsoleScope = "custom:spawnerd:console"
	DefaultHubName      = "JupyterHub"
)

// minSecret is the least key material accepted for the cookie keys.
const minSecret = 16

// Options configures the console.
type Options struct {
	// Prefix is the path the hub's proxy forwards to the console, unchanged.
	// Defaults to DefaultPrefix.
	Prefix string
	// HubPrefix is the hub's public prefix for browser redirects, on the
	// console's origin. Defaults to DefaultHubPrefix.
	HubPrefix string
	// HubName is shown in the header, linked to the hub's home page.
	// Defaults to DefaultHubName.
	HubName string
	// HubAPIURL is the hub's REST API as spawnerd reaches it, e.g.
	// http://127.0.0.1:8081/hub/api. Required.
	HubAPIURL string
	// ClientID is the console's OAuth client at the hub. Defaults to
	// DefaultClientID.
	ClientID string
	// ClientSecret is spawnerd's API token at the hub, the OAuth client's
	// secret. Required.
	ClientSecret string
	// ConsoleScope admits a non-admin hub user to the console when their
	// token carries it. Defaults to DefaultConsoleScope.
	ConsoleScope string
	// CookieSecret is the key material of the session cookie, shared by
	// every replica; at least 16 bytes. Required.
	CookieSecret []byte

	// Servers is required; History and Reservations are optional (nil: the
	// history is off; the reservation engine is off).
	Servers      Servers
	History      History
	Reservations Reservations

	// OwnerOf maps a hub user to the owner of their reservations (their
	// namespace). Defaults to the user name.
	OwnerOf func(user string) string
	// Location is the time zone of times on pages and of the chart's days.
	// Defaults to time.Local.
	Location *time.Location
	// HTTPClient makes the hub calls. Defaults to a client with a 10 s
	// timeout.
	HTTPClient *http.Client
	Logger     *zap.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// hubTimeout bounds one hub call of the default HTTP client.
const hubTimeout = 10 * time.Second

// withDefaults fills the defaults and checks what is required.
func (o Options) withDefaults() (Options, error) {
	o.Prefix = slashed(cmp.Or(o.Prefix, DefaultPrefix))
	o.HubPrefix = slashed(cmp.Or(o.HubPrefix, DefaultHubPrefix))
	o.HubName = cmp.Or(o.HubName, DefaultHubName)
	o.ClientID = cmp.Or(o.ClientID, DefaultClientID)
	o.ConsoleScope = cmp.Or(o.ConsoleScope, DefaultConsoleScope)
	o.HubAPIURL = strings.TrimRight(o.HubAPIURL, "/")
	if o.OwnerOf == nil {
		o.OwnerOf = func(user string) string { return user }
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: hubTimeout}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var errs []error
	// The prefix becomes part of ServeMux patterns.
	if strings.ContainsAny(o.Prefix, "{} \t\n") {
		errs = append(errs, fmt.Errorf("prefix %q: must be a plain path", o.Prefix))
	}
	if u, err := url.Parse(o.HubAPIURL); err != nil || o.HubAPIURL == "" || u.Scheme == "" || u.Host == "" {
		errs = append(errs, fmt.Errorf("hub API URL %q: must be an absolute http(s) URL", o.HubAPIURL))
	}
	if o.ClientSecret == "" {
		errs = append(errs, errors.New("client secret (spawnerd's hub API token) is required"))
	}
	if len(o.CookieSecret) < minSecret {
		errs = append(errs, fmt.Errorf("cookie secret: need at least %d bytes, have %d", minSecret, len(o.CookieSecret)))
	}
	if o.Servers == nil {
		errs = append(errs, errors.New("servers source is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("console options: %w", err)
	}
	return o, nil
}

// slashed makes p start and end with a slash.
func slashed(p string) string {
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// handler serves the console; New builds it.
type handler struct {
	opts    Options
	log     *zap.Logger
	keys    keys
	pages   pages
	static  staticFiles
	list    *listCache
	classes *classCache
	hub     hubClient
	mux     *http.ServeMux
}

// New returns the console's handler, which serves everything under
// Options.Prefix.
func New(opts Options) (http.Handler, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &handler{opts: opts, log: opts.Logger, list: &listCache{}, classes: &classCache{}}
	if h.keys, err = deriveKeys(opts.CookieSecret); err != nil {
		return nil, err
	}
	if h.static, err = loadStatic(opts.Prefix); err != nil {
		return nil, err
	}
	if h.pages, err = parsePages(h.funcs()); err != nil {
		return nil, err
	}
	h.hub = hubClient{base: opts.HubAPIURL, client: opts.HTTPClient, id: opts.ClientID, secret: opts.ClientSecret,
		redirect: opts.Prefix + callbackPath}
	h.routes()
	return secure(h.mux), nil
}

// Paths under the prefix that other parts of the package name.
const (
	callbackPath = "oauth_callback"
	loginPath    = "login"
	logoutPath   = "logout"
	statusPath   = "status"
)

// routes registers every page, endpoint and action.
func (h *handler) routes() {
	p := h.opts.Prefix
	m := http.NewServeMux()
	h.mux = m
	// Login.
	m.HandleFunc("GET "+p+loginPath, h.login)
	m.HandleFunc("GET "+p+callbackPath, h.callback)
	m.HandleFunc(p+logoutPath, h.logout)
	// Static files hold no data, so they need no login.
	m.HandleFunc("GET "+p+"static/{hash}/{name}", h.static.serve)

	// Servers.
	m.Handle("GET "+p+"{$}", h.page(roleConsole, h.serversPage))
	m.Handle("GET "+p+"api/servers", h.api(roleConsole, h.serversJSON))
	m.Handle("GET "+p+"servers/{user}", h.page(roleConsole, h.serverPage))
	m.Handle("GET "+p+"servers/{user}/{server}", h.page(roleConsole, h.serverPage))
	m.Handle("GET "+p+"api/detail/{user}", h.api(roleConsole, h.serverLive))
	m.Handle("GET "+p+"api/detail/{user}/{server}", h.api(roleConsole, h.serverLive))
	m.Handle("POST "+p+"stop", h.action(roleConsole, h.stop))
	// Sessions.
	m.Handle("GET "+p+"sessions", h.page(roleConsole, h.sessionsPage))
	m.Handle("GET "+p+"api/sessions", h.api(roleConsole, h.sessionsJSON))
	m.Handle("GET "+p+"api/sessions/chart", h.api(roleConsole, h.sessionsChart))
	m.Handle("GET "+p+"sessions.csv", h.page(roleConsole, h.sessionsCSV))
	// GPU classes.
	m.Handle("GET "+p+"gpu", h.page(roleConsole, h.gpuPage))
	m.Handle("POST "+p+"gpu/pause", h.action(roleConsole, h.pauseClass))
	m.Handle("POST "+p+"gpu/resume", h.action(roleConsole, h.resumeClass))
	// Every hub user.
	m.Handle("GET "+p+statusPath, h.page(roleUser, h.statusPage))

	m.Handle(p, h.page(roleUser, func(http.ResponseWriter, *http.Request, *session) error {
		return errNotFound("There is no such page.")
	}))
}

func (h *handler) now() time.Time { return h.opts.Now() }
