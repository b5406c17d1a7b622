package hubapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/dsmlp/spawner/lifecycle"
)

type foreverCall struct {
	key   lifecycle.Key
	saved lifecycle.SavedState
}

func (f *fakeServers) DeleteForever(_ context.Context, k lifecycle.Key, saved lifecycle.SavedState) (*lifecycle.StorageDeletion, error) {
	if f.foreverErr != nil {
		return nil, f.foreverErr
	}
	f.forever = append(f.forever, foreverCall{k, saved})
	return &lifecycle.StorageDeletion{User: k.User, Server: k.Server, PVC: saved.PVCName, Namespace: saved.Namespace, Result: lifecycle.StorageDeleted}, nil
}

func TestDeleteForeverPassesTheSavedState(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	for name, tc := range map[string]struct {
		path string
		want foreverCall
	}{
		"default server": {"/api/v1/users/alice/server/storage?pvc_name=claim-alice&namespace=jhub&user_id=7",
			foreverCall{lifecycle.Key{User: "alice"}, lifecycle.SavedState{PVCName: "claim-alice", Namespace: "jhub", UserID: 7}}},
		"named server, escaped": {"/api/v1/users/alice/servers/my%20work/storage?pvc_name=claim-alice--my-work",
			foreverCall{lifecycle.Key{User: "alice", Server: "my work"}, lifecycle.SavedState{PVCName: "claim-alice--my-work"}}},
		"nothing saved": {"/api/v1/users/alice/servers/w/storage",
			foreverCall{lifecycle.Key{User: "alice", Server: "w"}, lifecycle.SavedState{}}},
	} {
		t.Run(name, func(t *testing.T) {
			fs.forever = nil
			req, _ := http.NewRequest(http.MethodDelete, srv.URL+tc.path, nil)
			req.Header.Set("Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice")))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got lifecycle.StorageDeletion
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body error %v", resp.StatusCode, err)
			}
			if len(fs.forever) != 1 || fs.forever[0] != tc.want {
				t.Fatalf("calls %+v, want one %+v", fs.forever, tc.want)
			}
			if got.Result != lifecycle.StorageDeleted || got.User != "alice" || got.Server != tc.want.key.Server {
				t.Errorf("answer %+v", got)
			}
		})
	}
}

func TestDeleteForeverRefusals(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	// Tokens are accepted once, so each case names the user it signs for.
	alice, bob := "alice", "bob"
	long := strings.Repeat("a", 254)
	cases := map[string]struct {
		path, token string
		code        int
		field       string
	}{
		"no token":              {"/api/v1/users/alice/server/storage", "", 401, "Authorization"},
		"another user's server": {"/api/v1/users/alice/server/storage", bob, 403, "user"},
		"bad pvc_name":          {"/api/v1/users/alice/server/storage?pvc_name=Claim_Alice", alice, 400, "pvc_name"},
		"too long pvc_name":     {"/api/v1/users/alice/server/storage?pvc_name=" + long, alice, 400, "pvc_name"},
		"bad namespace":         {"/api/v1/users/alice/server/storage?namespace=a.b", alice, 400, "namespace"},
		"bad user_id":           {"/api/v1/users/alice/server/storage?user_id=seven", alice, 400, "user_id"},
		"negative user_id":      {"/api/v1/users/alice/server/storage?user_id=-1", alice, 400, "user_id"},
		"unknown parameter":     {"/api/v1/users/alice/server/storage?pvc=claim-alice", alice, 400, "pvc"},
		"repeated parameter":    {"/api/v1/users/alice/server/storage?pvc_name=a&pvc_name=b", alice, 400, "pvc_name"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tok := ""
			if tc.token != "" {
				tok = sign(t, jwt.SigningMethodHS256, secret, goodClaims(tc.token))
			}
			code, e := call(t, srv, http.MethodDelete, tc.path, tok, "")
			if code != tc.code || e.Field != tc.field || e.Error == "" {
				t.Errorf("got %d %+v, want %d naming %q", code, e, tc.code, tc.field)
			}
		})
	}
	if len(fs.forever) != 0 {
		t.Errorf("refused requests reached the manager: %+v", fs.forever)
	}

	fs.foreverErr = fmt.Errorf("deleting forever: %w", lifecycle.ErrActive)
	if code, e := call(t, srv, http.MethodDelete, "/api/v1/users/alice/server/storage", sign(t, jwt.SigningMethodHS256, secret, goodClaims(alice)), ""); code != http.StatusConflict || e.Field != "server" {
		t.Errorf("running server: got %d %+v, want 409 naming server", code, e)
	}
}

func TestStartPassesTheSavedPVCName(t *testing.T) {
	srv, fs := newTestServer(t, nil)
	tok := func() string { return sign(t, jwt.SigningMethodHS256, secret, goodClaims("alice")) }
	if code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok(), `{"state": {"pvc_name": "claim-old-alice"}}`); code != http.StatusAccepted {
		t.Fatalf("start: %d %+v", code, e)
	}
	if got := fs.started[len(fs.started)-1].SavedPVCName; got != "claim-old-alice" {
		t.Errorf("SavedPVCName = %q, want claim-old-alice", got)
	}
	for body, field := range map[string]string{
		`{"state": {"pvc_name": "Not A Name"}}`: "state.pvc_name",
		`{"state": {"pod_name": "x"}}`:          "state.pod_name", // the path of the unknown field
		`{"state": {"pvc_name": 3}}`:            "state.pvc_name",
	} {
		n := len(fs.started)
		if code, e := call(t, srv, http.MethodPost, "/api/v1/users/alice/server", tok(), body); code != http.StatusBadRequest || e.Field != field {
			t.Errorf("%s: got %d %+v, want 400 naming %s", body, code, e, field)
		}
		if len(fs.started) != n {
			t.Errorf("%s reached the manager", body)
		}
	}
}
