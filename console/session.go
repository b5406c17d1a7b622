package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Cookies.
const (
	sessionCookie = "spawnerd-session"
	// stateCookiePrefix + the first characters of a login's nonce names
	// that login's state cookie, so that logins in two tabs do not clash.
	stateCookiePrefix = "spawnerd-oauth-"
)

// Session lifetimes.
const (
	sessionTTL = 12 * time.Hour
	stateTTL   = 10 * time.Minute
)

// maxCookie is what browsers keep of one cookie.
const maxCookie = 4000

// keys are the cookie keys, derived from Options.CookieSecret, so every
// replica with the same secret reads every cookie.
type keys struct {
	aead cipher.AEAD
	csrf []byte
}

// HKDF info strings: one key per use, and a version to rotate them.
const (
	infoCookie = "spawnerd console cookie v1"
	infoCSRF   = "spawnerd console csrf v1"
)

func deriveKeys(secret []byte) (keys, error) {
	enc, err := hkdf.Key(sha256.New, secret, nil, infoCookie, 32)
	if err != nil {
		return keys{}, fmt.Errorf("deriving the cookie key: %w", err)
	}
	block, err := aes.NewCipher(enc)
	if err != nil {
		return keys{}, fmt.Errorf("cookie cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return keys{}, fmt.Errorf("cookie cipher: %w", err)
	}
	csrf, err := hkdf.Key(sha256.New, secret, nil, infoCSRF, 32)
	if err != nil {
		return keys{}, fmt.Errorf("deriving the CSRF key: %w", err)
	}
	return keys{aead: aead, csrf: csrf}, nil
}

// seal encrypts and authenticates v for one purpose (the cookie's name),
// so that a cookie cannot be replayed under another name.
func (k keys) seal(purpose string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding %s cookie: %w", purpose, err)
	}
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plain)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("%s cookie nonce: %w", purpose, err)
	}
	out := base64.RawURLEncoding.EncodeToString(k.aead.Seal(nonce, nonce, plain, []byte(purpose)))
	if len(out) > maxCookie {
		return "", fmt.Errorf("%s cookie: %d bytes is more than browsers keep", purpose, len(out))
	}
	return out, nil
}

var errBadCookie = errors.New("cookie does not open")

// open is seal's inverse; any tampering fails it.
func (k keys) open(purpose, value string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < k.aead.NonceSize() {
		return errBadCookie
	}
	n := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(purpose))
	if err != nil {
		return errBadCookie
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return errBadCookie
	}
	return nil
}

// session is what the session cookie holds: who is logged in, their roles
// when they logged in, and their hub access token (for the hub calls made
// on their behalf).
type session struct {
	ID      string `json:"i"`
	User    string `json:"u"`
	Admin   bool   `json:"a,omitempty"`
	Console bool   `json:"c,omitempty"`
	Token   string `json:"t"`
	Expires int64  `json:"e"` // unix seconds
}

// csrfToken binds action forms to the session: HMAC(key, session id).
func (k keys) csrfToken(s *session) string {
	m := hmac.New(sha256.New, k.csrf)
	m.Write([]byte("csrf\x00" + s.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (k keys) checkCSRF(s *session, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(k.csrfToken(s)))
}

// randomID is 24 random bytes, URL-safe.
func randomID() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// readSession returns the request's session, or nil when there is none,
// it does not open, or it expired.
func (h *handler) readSession(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	var s session
	if err := h.keys.open(sessionCookie, c.Value, &s); err != nil {
		return nil
	}
	if s.User == "" || s.ID == "" || h.now().Unix() >= s.Expires {
		return nil
	}
	return &s
}

// writeSession sets the session cookie.
func (h *handler) writeSession(w http.ResponseWriter, r *http.Request, s *session) error {
	v, err := h.keys.seal(sessionCookie, s)
	if err != nil {
		return err
	}
	http.SetCookie(w, h.cookie(r, sessionCookie, v, time.Unix(s.Expires, 0).Sub(h.now())))
	return nil
}

// cookie is one of the console's cookies: HttpOnly, SameSite=Lax (sent on
// the hub's redirect back, not on cross-site POSTs), Secure over https,
// scoped to the prefix. A negative maxAge deletes it.
func (h *handler) cookie(r *http.Request, name, value string, maxAge time.Duration) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: h.opts.Prefix, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: overHTTPS(r)}
	if maxAge < 0 {
		c.MaxAge = -1
	} else {
		c.MaxAge = max(1, int(maxAge/time.Second))
	}
	return c
}

// overHTTPS reports whether the browser used https, directly or through
// the hub's proxy.
func overHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}
