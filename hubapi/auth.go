package hubapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
)

// MaxTokenLifetime is the longest exp-iat the service accepts. It also bounds
// how long the replay cache must remember a token's jti, so keep it short.
const MaxTokenLifetime = time.Minute

// MaxTokenBytes caps the bearer token: the hub's are ~300 bytes, and a long
// one is refused before any parsing work is spent on it.
const MaxTokenBytes = 8 << 10

// MinSecretBytes is the shortest shared secret accepted: HS256 wants a key
// at least as long as its 32-byte output.
const MinSecretBytes = 32

// leeway is the clock skew allowed on exp, iat and nbf.
const leeway = 5 * time.Second

// maxReplayEntries bounds the replay cache: at most this many tokens may be
// accepted within one token lifetime (~2,000 requests/s per replica).
const maxReplayEntries = 1 << 17

// Audience is the aud claim every token must carry.
const Audience = "spawnerd"

// Claims are what the hub-side spawner class signs: sub is the hub user the
// call is for; admin grants the admin routes.
type Claims struct {
	Admin bool `json:"admin"`
	jwt.RegisteredClaims
}

// Authenticator checks the hub's HS256 tokens.
type Authenticator struct {
	secret []byte
	parser *jwt.Parser
	now    func() time.Time
	seen   *replayCache
	reads  *readCache
}

// NewAuthenticator returns an authenticator for the shared secret. The
// algorithm is pinned to HS256, so alg:none and RS/HS confusion are refused.
func NewAuthenticator(secret []byte, issuer string, now func() time.Time) (*Authenticator, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("the shared secret must be at least %d bytes, got %d (e.g. openssl rand -hex 32)", MinSecretBytes, len(secret))
	}
	if now == nil {
		now = time.Now
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	return &Authenticator{secret: secret, parser: jwt.NewParser(opts...), now: now, seen: newReplayCache(maxReplayEntries),
		reads: newReadCache(maxReadEntries)}, nil
}

// ReadSecret reads the shared secret from a file (trailing whitespace
// stripped, as the hub side does) or, if file is empty, from env var envName.
func ReadSecret(file, envName string) ([]byte, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading shared secret: %w", err)
		}
		s := strings.TrimRight(string(data), " \t\r\n")
		if s == "" {
			return nil, fmt.Errorf("shared secret file %s is empty", file)
		}
		return []byte(s), nil
	}
	if v := os.Getenv(envName); v != "" {
		return []byte(v), nil
	}
	return nil, fmt.Errorf("no shared secret: set --shared-secret-file or $%s", envName)
}

// errReplayed is a token whose jti was accepted before.
var errReplayed = errors.New("token already used (replayed jti); sign a new token for every request")

// Verify parses and checks a token, and remembers its jti so that it is
// accepted once.
func (a *Authenticator) Verify(raw string) (*Claims, error) { return a.verify(raw, false) }

// verify is Verify for a write, or for a read: a token whose jti was
// first accepted for a read is accepted again for reads (see readCache).
// That is also what lets two reads with one new token, arriving together
// before either is in the read cache (the hub's batched polls at its
// start-up), both pass, and a read whose token the full read cache could
// not hold pass again.
func (a *Authenticator) verify(raw string, read bool) (*Claims, error) {
	if len(raw) > MaxTokenBytes {
		return nil, fmt.Errorf("token is %d bytes, longer than the %d allowed", len(raw), MaxTokenBytes)
	}
	claims := &Claims{}
	tok, err := a.parser.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return a.secret, nil })
	if err != nil {
		return nil, err
	}
	if !tok.Valid {
		return nil, errors.New("invalid token")
	}
	if claims.Subject == "" {
		return nil, errors.New("token has no sub")
	}
	if claims.IssuedAt == nil || claims.ExpiresAt.Sub(claims.IssuedAt.Time) > MaxTokenLifetime {
		return nil, fmt.Errorf("token lifetime exceeds %s", MaxTokenLifetime)
	}
	if claims.ID == "" {
		return nil, errors.New("token has no jti")
	}
	if len(claims.ID) > 128 {
		return nil, errors.New("token jti is longer than 128 bytes")
	}
	// The parser accepts the token until exp+leeway, so remember it that long.
	if err := a.seen.add(claims.ID, claims.ExpiresAt.Add(leeway), a.now(), read); err != nil {
		return nil, err
	}
	return claims, nil
}

// replayCache remembers the jti of every accepted token until the token
// expires, so a token is used once. It is per replica: a token replayed to
// another replica within its ≤ 60 s life is accepted there. That residual
// risk is acceptable because tokens are minted per request, live at most a
// minute, and travel only between the hub and spawnerd inside the cluster
// (the NetworkPolicy admits only the hub); a shared store would put a
// network round trip and a new failure mode on every request.
type replayCache struct {
	mu   sync.Mutex
	max  int
	seen map[string]seenToken
	// order lists the jtis as added; expiries are within one lifetime of
	// insertion, so pruning from the front keeps every live entry.
	order []replayEntry
}

// seenToken is an accepted jti: until when it is remembered, and whether
// it was first accepted for a read.
type seenToken struct {
	until time.Time
	read  bool
}

type replayEntry struct {
	jti   string
	until time.Time
}

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, seen: map[string]seenToken{}}
}

// add records jti until until, or fails if it is already recorded (unless
// both its first use and this one are reads) or the cache is full (fail
// closed: a full cache must not let replays through).
func (c *replayCache) add(jti string, until, now time.Time, read bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.order) > 0 && !c.order[0].until.After(now) {
		if c.seen[c.order[0].jti].until.Equal(c.order[0].until) {
			delete(c.seen, c.order[0].jti)
		}
		c.order[0] = replayEntry{}
		c.order = c.order[1:]
	}
	if t, ok := c.seen[jti]; ok && t.until.After(now) {
		if read && t.read {
			return nil
		}
		return errReplayed
	}
	if len(c.seen) >= c.max {
		return fmt.Errorf("more than %d tokens accepted within %s; retry shortly", c.max, MaxTokenLifetime)
	}
	c.seen[jti] = seenToken{until: until, read: read}
	c.order = append(c.order, replayEntry{jti: jti, until: until})
	return nil
}

const claimsKey = "claims"

// middleware refuses any request without a valid bearer token (401).
func (a *Authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header.Get("Authorization")
		// Only headers are read here, so a request without a valid token
		// is refused before its body arrives (errorHandler then closes the
		// connection rather than wait for the body).
		scheme, raw, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || raw == "" {
			return &apiError{status: http.StatusUnauthorized, msg: "missing bearer token", field: "Authorization"}
		}
		raw = strings.TrimSpace(raw)
		read := isRead(c.Request())
		if read {
			if claims, ok := a.reads.get(raw, a.now()); ok {
				c.Set(claimsKey, claims)
				return next(c)
			}
		}
		claims, err := a.verify(raw, read)
		if err != nil {
			return &apiError{status: http.StatusUnauthorized, msg: "invalid token: " + err.Error(), field: "Authorization"}
		}
		if read {
			a.reads.put(raw, claims, claims.ExpiresAt.Add(leeway), a.now())
		}
		c.Set(claimsKey, claims)
		return next(c)
	}
}

// cachedRead returns the claims of a bearer token (the request's
// Authorization values) that the read cache holds; false sends the request
// through middleware, which verifies the token. Only reads may use it.
func (a *Authenticator) cachedRead(authorization []string) (*Claims, bool) {
	if len(authorization) == 0 {
		return nil, false
	}
	scheme, raw, ok := strings.Cut(authorization[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || raw == "" {
		return nil, false
	}
	return a.reads.get(strings.TrimSpace(raw), a.now())
}

// isRead reports whether a request only reads: a token first used for one
// may be used again for reads until it expires (see readCache). The
// batched poll is a POST only because it carries a list; it reads as GET
// polls do.
func isRead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodPost && r.URL.Path == pollsPath
}

// maxReadEntries bounds the read-token cache: one entry per token in use
// (the hub class keeps one per user for at most half a token's life).
const maxReadEntries = 1 << 16

// readCache remembers, by their SHA-256, tokens verified for a read, until
// they expire, so that repeated reads with one token (the hub's polls)
// cost a hash and a map lookup rather than a parse and an HMAC.
//
// Why this is safe: a token is accepted again only for a read (GET or
// HEAD: a poll, progress, a list; or the batched poll's POST, which
// changes nothing either), only until its own exp (≤ 60 s after iat,
// plus the leeway the parser allows anyway), and only with the
// claims it was verified with (its user and admin flag). A token first
// used for a write is never in the cache, and one first used for a read
// is refused for any write: Verify's replay cache holds its jti. So a
// captured token lets its holder repeat, for less than a minute, reads
// the token's user could make; every start, stop and delete still takes
// a token of its own. The hash is the key so the cache holds no usable
// token.
type readCache struct {
	mu    sync.RWMutex
	max   int
	m     map[[sha256.Size]byte]readEntry
	swept time.Time // when a full cache was last swept of expired tokens
}

type readEntry struct {
	claims *Claims
	until  time.Time
}

func newReadCache(max int) *readCache {
	return &readCache{max: max, m: map[[sha256.Size]byte]readEntry{}}
}

func (r *readCache) get(raw string, now time.Time) (*Claims, bool) {
	key := sha256.Sum256([]byte(raw))
	// Polls from many connections read at once; only an expired token
	// takes the write lock.
	r.mu.RLock()
	e, ok := r.m[key]
	r.mu.RUnlock()
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		r.mu.Lock()
		if cur, ok := r.m[key]; ok && !now.Before(cur.until) {
			delete(r.m, key)
		}
		r.mu.Unlock()
		return nil, false
	}
	return e.claims, true
}

// put remembers a token verified for a read; when the cache is full of
// live tokens the token is simply not remembered (its next read is
// verified in full), which is slower but never wrong.
func (r *readCache) put(raw string, claims *Claims, until, now time.Time) {
	key := sha256.Sum256([]byte(raw))
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= r.max && now.Sub(r.swept) >= time.Second {
		// At most once a second, so a flood of tokens cannot make every
		// read walk the whole cache.
		r.swept = now
		for k, e := range r.m {
			if !now.Before(e.until) {
				delete(r.m, k)
			}
		}
	}
	if len(r.m) >= r.max {
		return
	}
	r.m[key] = readEntry{claims: claims, until: until}
}

func claimsOf(c echo.Context) *Claims {
	cl, _ := c.Get(claimsKey).(*Claims)
	return cl
}

// requireAdmin refuses tokens without the admin claim (403).
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if cl := claimsOf(c); cl == nil || !cl.Admin {
			return &apiError{status: http.StatusForbidden, msg: "this route needs a token with the admin claim", field: "admin"}
		}
		return next(c)
	}
}

// Sign makes a token as the hub-side spawner class does, with a fresh jti:
// for tools that call the API with the shared secret (the admin CLI,
// tests). A token is accepted once, so sign one per request.
func Sign(secret []byte, user string, admin bool, now time.Time) (string, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("token id: %w", err)
	}
	claims := Claims{Admin: admin, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "jupyterhub", Subject: user, Audience: jwt.ClaimStrings{Audience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(MaxTokenLifetime)),
		ID: hex.EncodeToString(id),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}
