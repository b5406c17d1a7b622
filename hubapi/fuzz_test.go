package hubapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzDecodeStrict feeds start bodies to the strict decoder: it never
// panics, refuses with a 400 naming a field, and accepts only one JSON
// value without duplicate keys that encoding/json reads the same way.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{``, `{}`, `{}}`, `{} {}`, `{"ENV": {}}`, `{"env": {"A": "1", "A": "2"}}`,
		`{"env": {"JUPYTERHUB_API_TOKEN": "t"}, "user_options": {"profile": "gpu", "spark_workers": 3}, "user_id": 7, "state": {"pvc_name": "claim-a"}}`,
		`{"user_id": 1e400}`, `{"user_options": {"a": [1, {"b": null}]}}`, `[]`, `null`, `"x"`, "{\"env\":{\"\\u0041\":\"1\",\"A\":\"2\"}}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req StartRequest
		err := decodeStrict(bytes.NewReader(data), &req)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.field == "" || ae.msg == "" {
				t.Fatalf("refusal %#v is not a 400 naming a field", err)
			}
			return
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		var again StartRequest
		if err := json.Unmarshal(data, &again); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
	})
}

// FuzzVerify feeds tokens to the JWT check: it never panics, and whatever it
// accepts is HS256 with the shared secret, has a subject and a jti, lives at
// most MaxTokenLifetime and is accepted once.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	good, err := Sign(secret, "alice", false, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good + "x")
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add("")
	f.Add("not.a.jwt")
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSJ9.")
	f.Add(strings.Repeat("a", MaxTokenBytes+1))
	f.Fuzz(func(t *testing.T, raw string) {
		auth, err := NewAuthenticator(secret, "jupyterhub", func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		claims, err := auth.Verify(raw)
		if err != nil {
			return
		}
		if len(raw) > MaxTokenBytes || claims.Subject == "" || claims.ID == "" || claims.IssuedAt == nil || claims.ExpiresAt == nil ||
			claims.ExpiresAt.Sub(claims.IssuedAt.Time) > MaxTokenLifetime {
			t.Fatalf("accepted %q with claims %+v", raw, claims)
		}
		tok, _, err := jwt.NewParser().ParseUnverified(raw, &Claims{})
		if err != nil || tok.Method.Alg() != "HS256" {
			t.Fatalf("accepted %q: alg %v, %v", raw, tok, err)
		}
		if _, err := auth.Verify(raw); err == nil {
			t.Fatalf("accepted %q twice", raw)
		}
	})
}
