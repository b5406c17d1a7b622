package bench_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// consoleSessionCookie is the console's session cookie (console.sessionCookie).
const consoleSessionCookie = "spawnerd-session"

var (
	formAction = regexp.MustCompile(`<form[^>]*\baction="([^"]*)"`)
	xsrfInput  = regexp.MustCompile(`name="_xsrf"[^>]*\bvalue="([^"]*)"|value="([^"]*)"[^>]*\bname="_xsrf"`)
)

// browserClient is an HTTP client that keeps cookies and follows
// redirects, as a browser does, over kept-alive connections.
func browserClient() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		panic(err) // cookiejar.New fails only on a bad public suffix list, and is given none
	}
	tr := &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}
	return &http.Client{Jar: jar, Transport: tr, Timeout: time.Minute}
}

// consoleLogin logs user in to the console at base+prefix (the proxy's
// public URL) the way a browser does: the console sends the anonymous
// browser to the hub's OAuth authorize endpoint, the hub sends it to its
// login form, the form is posted (with the hub's _xsrf token when the hub
// asks for one), and the redirects lead back through the authorize
// endpoint to the console's callback, which sets the session cookie.
func consoleLogin(ctx context.Context, c *http.Client, base, prefix, user, password string) error {
	page, resp, err := get(ctx, c, base+prefix)
	if err != nil {
		return err
	}
	login := resp.Request.URL
	if !strings.HasSuffix(login.Path, "/hub/login") {
		return fmt.Errorf("an anonymous GET %s ended at %s (status %d), not the hub's login form", prefix, login, resp.StatusCode)
	}
	action := login
	if m := formAction.FindStringSubmatch(page); m != nil && m[1] != "" {
		if action, err = login.Parse(html.UnescapeString(m[1])); err != nil {
			return fmt.Errorf("the login form's action %q: %w", m[1], err)
		}
	}
	form := url.Values{"username": {user}, "password": {password}}
	if m := xsrfInput.FindStringSubmatch(page); m != nil {
		form.Set("_xsrf", html.UnescapeString(m[1]+m[2]))
	} else {
		for _, ck := range c.Jar.Cookies(login) {
			if ck.Name == "_xsrf" {
				form.Set("_xsrf", ck.Value)
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, action.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", login.String())
	resp, err = c.Do(req)
	if err != nil {
		return fmt.Errorf("posting the hub's login form: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != prefix {
		return fmt.Errorf("after the hub's login the browser is at %s with status %d: %.300s", resp.Request.URL, resp.StatusCode, body)
	}
	u, _ := url.Parse(base + prefix)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == consoleSessionCookie {
			return nil
		}
	}
	return fmt.Errorf("logged in, but the console set no %s cookie", consoleSessionCookie)
}

// get fetches url and returns its body as text.
func get(ctx context.Context, c *http.Client, url string) (string, *http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return string(body), resp, nil
}
