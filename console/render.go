package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// pages are the parsed templates, one set per page: the layout, the
// shared partials and the page's own file.
type pages map[string]*template.Template

func parsePages(funcs template.FuncMap) (pages, error) {
	ps := pages{}
	// The files under templates/ that are pages; chart is the sessions
	// chart fragment, which the sessions page includes too.
	for _, name := range []string{"servers", "server", "sessions", "chart", "gpu", "status", "error", "loggedout"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(files,
			"templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parsing the %s page: %w", name, err)
		}
		ps[name] = t
	}
	return ps, nil
}

// longTime is how the pages write times, with the zone.
const longTime = "2006-01-02 15:04:05 MST"

// funcs are the templates' helpers; they close over the handler's options
// (prefix, time zone), not over any global.
func (h *handler) funcs() template.FuncMap {
	return template.FuncMap{
		"static": func(name string) (string, error) { return h.static.url(name) },
		"time":   h.fmtTime,
		"ptime": func(t *time.Time) string {
			if t == nil {
				return "—"
			}
			return h.fmtTime(*t)
		},
		"server": serverLabel,
	}
}

func (h *handler) inLoc(t time.Time) time.Time { return t.In(h.opts.Location) }

func (h *handler) fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return h.inLoc(t).Format(longTime)
}

// serverPath is a server's detail page, with its names escaped.
func (h *handler) serverPath(user, server string) string {
	p := h.opts.Prefix + "servers/" + url.PathEscape(user)
	if server != "" {
		p += "/" + url.PathEscape(server)
	}
	return p
}

// serverLabel names a server as the hub does: "" is the default server.
func serverLabel(server string) string {
	if server == "" {
		return "(default)"
	}
	return server
}

// humanDuration is "3d 4h", "5h 12m", "12m", "40s".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	days, hours, mins := int(d/(24*time.Hour)), int(d/time.Hour)%24, int(d/time.Minute)%60
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh", days, hours)
	case hours > 0:
		return fmt.Sprintf("%dh %dm", hours, mins)
	case mins > 0:
		return fmt.Sprintf("%dm", mins)
	}
	return fmt.Sprintf("%ds", int(d/time.Second))
}

// view is what every page's template gets: the layout's fields and the
// page's own Data.
type view struct {
	Title, Nav string
	User       string
	Console    bool
	CSRF       string
	Prefix     string
	HubPrefix  string
	HubName    string
	// Scripts are the page's static scripts, besides console.js.
	Scripts []string
	// Preload are the data the page's script fetches at once: the browser
	// asks for them while it reads the page, not after its scripts ran.
	Preload []string
	// Loaded marks the main container data-loaded when the page's data is
	// rendered on the server (pages whose script fetches it set it later).
	Loaded bool
	Data   any
}

func (h *handler) layout(r *http.Request, s *session, title, nav string) view {
	v := view{Title: title, Nav: nav, Prefix: h.opts.Prefix, HubPrefix: h.opts.HubPrefix, HubName: h.opts.HubName, Loaded: true}
	if s != nil {
		v.User, v.Console, v.CSRF = s.User, s.Console, h.keys.csrfToken(s)
	}
	return v
}

// render writes a page. It renders into a buffer first, so a template
// error is a clean 500, not half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, v view, data any) {
	v.Data = data
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.log.Error("console: rendering a page failed", zap.String("page", name), zap.String("user", v.User), zap.Error(err))
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// renderFragment executes one template of a page set, for a script that
// swaps it into the page, with an ETag so that an unchanged part costs a
// 304.
func (h *handler) renderFragment(w http.ResponseWriter, r *http.Request, page, name string, data any) error {
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("rendering %s: %w", name, err)
	}
	serveTagged(w, r, "text/html; charset=utf-8", newTagged(buf.Bytes()))
	return nil
}

// tagged is a body with its ETag and, for larger bodies, a gzip copy made
// when a client first asks for it.
type tagged struct {
	body []byte
	etag string
	once sync.Once
	gz   []byte
}

// gzipOver is the size from which a body is sent compressed.
const gzipOver = 1024

func newTagged(body []byte) *tagged {
	sum := sha256.Sum256(body)
	return &tagged{body: body, etag: `W/"` + hex.EncodeToString(sum[:16]) + `"`}
}

// gzipped is the compressed body, or nil when not worth it.
func (t *tagged) gzipped() []byte {
	t.once.Do(func() {
		if len(t.body) < gzipOver {
			return
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		_, _ = zw.Write(t.body)
		if zw.Close() == nil {
			t.gz = buf.Bytes()
		}
	})
	return t.gz
}

// serveTagged answers 304 when the client has this version already.
func serveTagged(w http.ResponseWriter, r *http.Request, typ string, t *tagged) {
	hd := w.Header()
	hd.Set("ETag", t.etag)
	hd.Set("Vary", "Accept-Encoding")
	if etagMatch(r.Header.Get("If-None-Match"), t.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Type", typ)
	body := t.body
	if acceptsGzip(r) {
		if gz := t.gzipped(); gz != nil {
			hd.Set("Content-Encoding", "gzip")
			body = gz
		}
	}
	hd.Set("Content-Length", fmt.Sprint(len(body)))
	_, _ = w.Write(body)
}

// etagMatch is If-None-Match's weak comparison.
func etagMatch(header, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == want {
			return true
		}
	}
	return false
}

func acceptsGzip(r *http.Request) bool {
	for _, enc := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(enc), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
