package console

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Login follows the convention of JupyterHub services (HubOAuth): the
// authorization code flow against the hub, with the service's API token
// as the client secret.

// stateNonceChars of a login's nonce name its state cookie.
const stateNonceChars = 12

// loginWait bounds the hub calls of one login.
const loginWait = 15 * time.Second

// stateCookieValue is what a login's state cookie holds.
type stateCookieValue struct {
	State   string `json:"s"`
	Expires int64  `json:"e"`
}

// login starts a login explicitly, e.g. from a "log in again" link.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	h.startLogin(w, r, r.URL.Query().Get("next"))
}

// startLogin sends the browser to the hub's authorize endpoint. The state
// is a random nonce bound to this browser by a short-lived cookie, plus
// where to go after the login.
func (h *handler) startLogin(w http.ResponseWriter, r *http.Request, next string) {
	nonce, err := randomID()
	if err != nil {
		h.fail(w, r, nil, err)
		return
	}
	state := nonce + "." + base64.RawURLEncoding.EncodeToString([]byte(h.safeNext(next)))
	name := stateCookiePrefix + nonce[:stateNonceChars]
	v, err := h.keys.seal(name, stateCookieValue{State: state, Expires: h.now().Add(stateTTL).Unix()})
	if err != nil {
		h.fail(w, r, nil, err)
		return
	}
	http.SetCookie(w, h.cookie(r, name, v, stateTTL))
	q := url.Values{"client_id": {h.opts.ClientID}, "redirect_uri": {h.hub.redirect}, "response_type": {"code"}, "state": {state}}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, h.opts.HubPrefix+"api/oauth2/authorize?"+q.Encode(), http.StatusFound)
}

// safeNext keeps a post-login destination only if it is a path under the
// prefix, so that a login link cannot send the browser elsewhere.
func (h *handler) safeNext(next string) string {
	u, err := url.Parse(next)
	switch {
	case err != nil, next == "", u.Scheme != "", u.Host != "", u.User != nil,
		strings.HasPrefix(next, "//"), strings.ContainsAny(next, "\\\x00\r\n"),
		!strings.HasPrefix(u.Path, h.opts.Prefix),
		strings.Contains(u.Path+"/", "/../"): // a dot segment anywhere, decoded
		return h.opts.Prefix
	}
	// Not back into the login itself.
	for _, p := range []string{callbackPath, loginPath, logoutPath} {
		if strings.HasPrefix(u.Path, h.opts.Prefix+p) {
			return h.opts.Prefix
		}
	}
	return next
}

// callback ends a login: check the state against this browser's cookie,
// trade the code for a token server-side, read the user, set the session.
func (h *handler) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		h.log.Info("console: login refused by the hub", zap.String("error", e))
		h.fail(w, r, nil, &httpError{status: http.StatusForbidden, msg: "The hub did not authorize the login.", login: true})
		return
	}
	next, ok := h.checkState(w, r, q.Get("state"))
	if !ok {
		h.log.Info("console: login state refused", zap.String("remote", r.RemoteAddr))
		h.fail(w, r, nil, &httpError{status: http.StatusBadRequest,
			msg: "This login link is not valid in this browser (it expired, or was used already).", login: true})
		return
	}
	code := q.Get("code")
	if code == "" {
		h.fail(w, r, nil, &httpError{status: http.StatusBadRequest, msg: "The hub sent no authorization code.", login: true})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), loginWait)
	defer cancel()
	s, err := h.newSession(ctx, code)
	if err != nil {
		h.log.Warn("console: login failed", zap.Error(err))
		var he *httpError
		if !errors.As(err, &he) {
			err = &httpError{status: http.StatusBadGateway, msg: "The login could not be completed with the hub.", login: true}
		}
		h.fail(w, r, nil, err)
		return
	}
	if err := h.writeSession(w, r, s); err != nil {
		h.fail(w, r, nil, err)
		return
	}
	h.log.Info("console: logged in", zap.String("user", s.User), zap.Bool("admin", s.Admin), zap.Bool("console", s.Console))
	if !s.Console && next == h.opts.Prefix {
		next = h.opts.Prefix + statusPath
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, next, http.StatusFound)
}

// checkState matches the callback's state with the cookie the login set in
// this browser, deletes that cookie (a state is good once), and returns
// where to go next.
func (h *handler) checkState(w http.ResponseWriter, r *http.Request, state string) (string, bool) {
	nonce, enc, ok := strings.Cut(state, ".")
	if !ok || len(nonce) < stateNonceChars {
		return "", false
	}
	name := stateCookiePrefix + nonce[:stateNonceChars]
	c, err := r.Cookie(name)
	if err != nil {
		return "", false
	}
	http.SetCookie(w, h.cookie(r, name, "", -1))
	var v stateCookieValue
	if h.keys.open(name, c.Value, &v) != nil || h.now().Unix() >= v.Expires ||
		subtle.ConstantTimeCompare([]byte(v.State), []byte(state)) != 1 {
		return "", false
	}
	next, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return h.safeNext(string(next)), true
}

// newSession exchanges the code and reads who logged in.
func (h *handler) newSession(ctx context.Context, code string) (*session, error) {
	tok, err := h.hub.exchange(ctx, code)
	if err != nil {
		return nil, err
	}
	u, err := h.hub.user(ctx, tok.AccessToken)
	if err != nil {
		return nil, err
	}
	if u.Kind != "user" || u.Name == "" {
		return nil, &httpError{status: http.StatusForbidden, msg: "Only hub users can log in here.", login: true}
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	now := h.now()
	return &session{ID: id, User: u.Name, Admin: u.Admin, Console: u.Admin || slices.Contains(u.Scopes, h.opts.ConsoleScope),
		Token: tok.AccessToken, Expires: sessionExpiry(now, tok).Unix()}, nil
}

// logout clears the session; the hub's own login is left as it is.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if s := h.readSession(r); s != nil {
		h.log.Info("console: logged out", zap.String("user", s.User))
	}
	http.SetCookie(w, h.cookie(r, sessionCookie, "", -1))
	h.render(w, r, http.StatusOK, "loggedout", h.layout(r, nil, "Logged out", ""), nil)
}
