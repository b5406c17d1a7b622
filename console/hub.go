package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// hubClient makes the console's calls to the hub's REST API.
type hubClient struct {
	base   string // HubAPIURL, without a trailing slash
	client *http.Client
	id     string
	secret string
	// redirect is the redirect_uri of the authorization request, which the
	// token request must repeat.
	redirect string
}

// hubToken is the hub's OAuth token answer.
type hubToken struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"`
}

// hubUser is the hub's model of the token's owner (GET /user).
type hubUser struct {
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Admin  bool     `json:"admin"`
	Groups []string `json:"groups"`
	Scopes []string `json:"scopes"`
}

// hubError is a hub answer other than the one expected.
type hubError struct {
	Status  int
	Message string
}

func (e *hubError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the hub answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("the hub answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// maxHubBody bounds what is read of a hub answer.
const maxHubBody = 1 << 20

// exchange trades an authorization code for an access token.
func (c hubClient) exchange(ctx context.Context, code string) (hubToken, error) {
	form := url.Values{"client_id": {c.id}, "client_secret": {c.secret}, "grant_type": {"authorization_code"},
		"code": {code}, "redirect_uri": {c.redirect}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/oauth2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return hubToken{}, fmt.Errorf("token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	var tok hubToken
	if err := c.do(req, &tok, http.StatusOK); err != nil {
		return hubToken{}, fmt.Errorf("exchanging the authorization code: %w", err)
	}
	if tok.AccessToken == "" {
		return hubToken{}, errors.New("exchanging the authorization code: the hub sent no access token")
	}
	return tok, nil
}

// user reads the model of the token's owner.
func (c hubClient) user(ctx context.Context, token string) (hubUser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/user", nil)
	if err != nil {
		return hubUser{}, fmt.Errorf("user request: %w", err)
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Accept", "application/json")
	var u hubUser
	if err := c.do(req, &u, http.StatusOK); err != nil {
		return hubUser{}, fmt.Errorf("reading the logged-in user: %w", err)
	}
	return u, nil
}

// stopServer asks the hub to stop a server with the caller's token, so
// that the hub records the stop as theirs. It returns the hub's status.
func (c hubClient) stopServer(ctx context.Context, token, user, server string) (int, error) {
	path := "/users/" + url.PathEscape(user) + "/server"
	if server != "" {
		path = "/users/" + url.PathEscape(user) + "/servers/" + url.PathEscape(server)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.base+path, nil)
	if err != nil {
		return 0, fmt.Errorf("stop request: %w", err)
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("asking the hub to stop %s's server %q: %w", user, server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHubBody))
		return resp.StatusCode, nil
	}
	return resp.StatusCode, readHubError(resp)
}

// do sends req and decodes a JSON answer of one of the wanted statuses.
func (c hubClient) do(req *http.Request, out any, want ...int) error {
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		return readHubError(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxHubBody)).Decode(out); err != nil {
		return fmt.Errorf("decoding the hub's answer: %w", err)
	}
	return nil
}

// readHubError reads the hub's error message: JSON {"message": ...} from
// its API, or the first part of a text body.
func readHubError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHubBody))
	var j struct {
		Message string `json:"message"`
		Error   string `json:"error"`
		Detail  string `json:"error_description"`
	}
	msg := ""
	if json.Unmarshal(body, &j) == nil {
		msg = strings.TrimSpace(strings.Join(nonEmpty(j.Message, j.Error, j.Detail), ": "))
	} else if !strings.Contains(resp.Header.Get("Content-Type"), "html") {
		msg = strings.TrimSpace(string(body))
	}
	const maxMsg = 300
	if len(msg) > maxMsg {
		msg = msg[:maxMsg] + "…"
	}
	return &hubError{Status: resp.StatusCode, Message: msg}
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// sessionExpiry is when a session made now with tok ends: sessionTTL, or
// the token's own lifetime if shorter.
func sessionExpiry(now time.Time, tok hubToken) time.Time {
	ttl := sessionTTL
	if tok.ExpiresIn > 0 {
		ttl = min(ttl, time.Duration(tok.ExpiresIn)*time.Second)
	}
	return now.Add(ttl)
}
