package spawnerd_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/hubapi"
)

// readTimeout is the --read-timeout the slow-request tests give spawnerd.
const readTimeout = 3 * time.Second

// slowBody sends headers that announce a 100,000-byte body and sends no
// body, then reads until the server answers or closes. It returns the first
// response line ("" if closed without one) and how long that took.
func slowBody(t *testing.T, conn net.Conn, path, token string) (string, time.Duration) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // far past every server timeout
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	start := time.Now()
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: spawnerd\r\nContent-Type: application/json\r\n%sContent-Length: 100000\r\n\r\n", path, auth); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	took := time.Since(start)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("no answer and no close after %s: the server waits for the body forever", took.Round(time.Millisecond))
	}
	return strings.TrimSpace(line), took
}

func hardenedSetup(t *testing.T) (*fixture, string) {
	t.Helper()
	if err := env.InstallReservationCRD(context.Background()); err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	webhook := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(gpuConfig, ns, 60),
		Args: []string{"--namespace", ns, "--leader-elect=false", "--webhook-listen", webhook,
			"--read-timeout", readTimeout.String(), "--idle-timeout", "2s"},
	})
	return &fixture{ns: ns, api: api}, webhook
}

// A request that announces a body and never sends it is answered or closed
// within the read timeout: at once with a 401 when it has no token, after
// --read-timeout when it has one, and on the webhook's port too.
func TestSlowBodyIsCut(t *testing.T) {
	f, webhook := hardenedSetup(t)
	addr := strings.TrimPrefix(f.api.URL, "http://")
	path := harness.ServerPath("alice", "")

	t.Run("api without a token", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		line, took := slowBody(t, conn, path, "")
		t.Logf("token-less slow body: %q after %s", line, took)
		if !strings.Contains(line, "401") || took > time.Second {
			t.Errorf("got %q after %s, want a 401 at once (before the body)", line, took)
		}
	})
	t.Run("api with a token", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		line, took := slowBody(t, conn, path, harness.Token(t, f.api.Secret, "alice", false))
		t.Logf("authenticated slow body: %q after %s", line, took)
		if took > readTimeout+2*time.Second {
			t.Errorf("answered %q after %s, want within --read-timeout %s", line, took, readTimeout)
		}
	})
	t.Run("webhook", func(t *testing.T) {
		conn, err := tls.Dial("tcp", webhook, &tls.Config{InsecureSkipVerify: true}) // the self-signed certificate
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		line, took := slowBody(t, conn, "/mutate", "")
		t.Logf("webhook slow body: %q after %s", line, took)
		if took > readTimeout+2*time.Second {
			t.Errorf("answered %q after %s, want within --read-timeout %s", line, took, readTimeout)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: spawnerd\r\n\r\n")
		rd := bufio.NewReader(conn)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		start := time.Now()
		_, err = rd.ReadByte()
		took := time.Since(start)
		t.Logf("idle connection closed after %s (err %v)", took, err)
		if err != io.EOF || took > 5*time.Second {
			t.Errorf("idle connection: %v after %s, want closed (EOF) after --idle-timeout 2s", err, took)
		}
	})
}

// A token may be used again only for reads (the hub class reuses one per
// user for its polls), never for a write; an over-long one is refused.
func TestTokenReplayAndSize(t *testing.T) {
	f := setup(t, 60)
	call := func(method, token string) (int, hubapi.ErrorBody) {
		req, _ := http.NewRequest(method, f.api.URL+harness.ServerPath("alice", ""), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body hubapi.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	get := func(token string) (int, hubapi.ErrorBody) { return call(http.MethodGet, token) }
	replayed := func(code int, body hubapi.ErrorBody) bool {
		return code == http.StatusUnauthorized && strings.Contains(body.Error, "replayed")
	}

	tok := harness.Token(t, f.api.Secret, "alice", false)
	if code, body := get(tok); code != http.StatusOK {
		t.Fatalf("first use: %d %+v", code, body)
	}
	if code, body := get(tok); code != http.StatusOK {
		t.Errorf("a read token read again: %d %+v, want 200", code, body)
	}
	if code, body := call(http.MethodDelete, tok); !replayed(code, body) {
		t.Errorf("a read token used for a stop: %d %+v, want 401 saying replayed", code, body)
	}

	w := harness.Token(t, f.api.Secret, "alice", false)
	if code, body := call(http.MethodDelete, w); code == http.StatusUnauthorized {
		t.Fatalf("first use of a token for a stop: %d %+v", code, body)
	}
	if code, body := call(http.MethodDelete, w); !replayed(code, body) {
		t.Errorf("a stop token used for a second stop: %d %+v, want 401 saying replayed", code, body)
	}
	if code, body := get(w); !replayed(code, body) {
		t.Errorf("a stop token used for a read: %d %+v, want 401 saying replayed", code, body)
	}

	padded := func(n int) string {
		now := time.Now()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"iss": "jupyterhub", "aud": "spawnerd", "sub": "alice", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
			"jti": fmt.Sprint(now.UnixNano()), "pad": strings.Repeat("x", n),
		}).SignedString(f.api.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if code, body := get(padded(9 << 10)); code != http.StatusUnauthorized || !strings.Contains(body.Error, "longer than") {
		t.Errorf("a 12 KiB token: %d %+v, want 401 saying it is too long", code, body)
	}
	if code, _ := get(padded(500 << 10)); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 670 KB token: %d, want 431 (over --max-header-bytes)", code)
	}
}

// When the API server refuses spawnerd (here: its credentials may not
// create pods in the notebook namespace), the user sees a request ID and no
// service-account name; spawnerd's log has the details under that ID.
func TestForbiddenHidesServiceAccount(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	sa := "system:serviceaccount:" + ns + ":spawnerd-without-pods"
	rbac := env.Client.RbacV1()
	readAll := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "read-all-" + ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := rbac.ClusterRoles().Create(ctx, readAll, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), readAll.Name, metav1.DeleteOptions{}) })
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "spawnerd-without-pods", Namespace: ns}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: readAll.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: readAll.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), readAll.Name, metav1.DeleteOptions{})
	})
	// Every write but a pod create.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "spawnerd-without-pods"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"services", "persistentvolumeclaims", "configmaps", "secrets", "events"}, Verbs: []string{"*"}},
	}}
	if _, err := rbac.Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// spawnerd's kubeconfig: the admin one, impersonating the service account.
	kc, err := clientcmd.LoadFromFile(env.Cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range kc.AuthInfos {
		u.Impersonate = sa
	}
	limited := filepath.Join(t.TempDir(), "limited.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, limited); err != nil {
		t.Fatal(err)
	}
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(configTemplate, ns, 60),
		Args:   []string{"--kubeconfig", limited}, // the later flag wins
	})

	var body hubapi.ErrorBody
	code := api.Do(http.MethodPost, harness.ServerPath("alice", ""), "alice", false, startBody("alice", "", nil), &body)
	t.Logf("answer: %d %+v", code, body)
	if code != http.StatusInternalServerError || body.RequestID == "" || !strings.Contains(body.Error, body.RequestID) {
		t.Fatalf("got %d %+v, want 500 with a request ID", code, body)
	}
	for _, secret := range []string{"serviceaccount", "spawnerd-without-pods", "cannot create", ns} {
		if strings.Contains(body.Error, secret) {
			t.Errorf("the user sees %q: %q", secret, body.Error)
		}
	}
	logged, _ := api.WaitForLogLine(10*time.Second, body.RequestID, `"request failed"`)
	if !strings.Contains(logged, sa) || !strings.Contains(logged, "cannot create resource") {
		t.Errorf("spawnerd's log line for request %s: %q, want the full Forbidden", body.RequestID, logged)
	}
}

// A start body is one JSON value with exact, unrepeated keys; anything
// else is a 400 naming the field, and creates nothing.
func TestStartBodyDecodedStrictly(t *testing.T) {
	f := setup(t, 60)
	for name, tc := range map[string]struct {
		body  string
		field string
	}{
		"trailing brace": {`{"env": {}}}`, "body"},
		"key case":       {`{"ENV": {"A": "1"}}`, "ENV"},
		"duplicate key":  {`{"env": {}, "env": {"A": "1"}}`, "env"},
		"duplicate env":  {`{"env": {"A": "1", "A": "2"}}`, "env.A"},
	} {
		var body hubapi.ErrorBody
		code := f.api.Do(http.MethodPost, harness.ServerPath("alice", ""), "alice", false, []byte(tc.body), &body)
		if code != http.StatusBadRequest || body.Field != tc.field {
			t.Errorf("%s: %d %+v, want 400 naming %s", name, code, body, tc.field)
		}
	}
	pods, err := env.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("refused bodies created %d pods", len(pods.Items))
	}
}
