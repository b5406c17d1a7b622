package hubapi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
)

// MaxTokenLifetime is the longest exp-iat the service accepts: a stolen token
// is useful for minutes at most.
const MaxTokenLifetime = 5 * time.Minute

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
}

// NewAuthenticator returns an authenticator for the shared secret. The
// algorithm is pinned to HS256, so alg:none and RS/HS confusion are refused.
func NewAuthenticator(secret []byte, issuer string, now func() time.Time) (*Authenticator, error) {
	if len(secret) < 16 {
		return nil, errors.New("the shared secret must be at least 16 bytes")
	}
	if now == nil {
		now = time.Now
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(5 * time.Second),
		jwt.WithTimeFunc(now),
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	return &Authenticator{secret: secret, parser: jwt.NewParser(opts...), now: now}, nil
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

// Verify parses and checks a token.
func (a *Authenticator) Verify(raw string) (*Claims, error) {
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
	return claims, nil
}

const claimsKey = "claims"

// middleware refuses any request without a valid bearer token (401).
func (a *Authenticator) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header.Get("Authorization")
		scheme, raw, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || raw == "" {
			return &apiError{status: http.StatusUnauthorized, msg: "missing bearer token", field: "Authorization"}
		}
		claims, err := a.Verify(strings.TrimSpace(raw))
		if err != nil {
			return &apiError{status: http.StatusUnauthorized, msg: "invalid token: " + err.Error(), field: "Authorization"}
		}
		c.Set(claimsKey, claims)
		return next(c)
	}
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

// Sign makes a token as the hub-side spawner class does: for tools that
// call the API with the shared secret (the admin CLI, tests).
func Sign(secret []byte, user string, admin bool, now time.Time) (string, error) {
	claims := Claims{Admin: admin, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "jupyterhub", Subject: user, Audience: jwt.ClaimStrings{Audience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}
