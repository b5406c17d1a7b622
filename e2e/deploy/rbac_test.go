package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
)

// access is one `kubectl auth can-i` question: verb on resource in ns
// ("" for cluster-scoped resources, "*" for all namespaces).
type access struct {
	verb, resource, ns string
	want               bool
}

func (a access) String() string {
	where := "in " + a.ns
	switch a.ns {
	case "":
		where = "cluster-wide"
	case "*":
		where = "in all namespaces"
	}
	return fmt.Sprintf("%s %s %s", a.verb, a.resource, where)
}

// canI asks the API server whether the chart's service account in ns may do a.
func canI(t *testing.T, ns string, a access) bool {
	t.Helper()
	// "pods/exec" would read as the pod named exec: subresources need their
	// flag. One object is "secrets:NAME".
	resource, sub, _ := strings.Cut(a.resource, "/")
	if r, name, ok := strings.Cut(resource, ":"); ok {
		resource = r + "/" + name
	}
	args := []string{"auth", "can-i", a.verb, resource, "--subresource", sub, "--as", "system:serviceaccount:" + ns + ":" + release}
	switch a.ns {
	case "":
	case "*":
		args = append(args, "--all-namespaces")
	default:
		args = append(args, "--namespace", a.ns)
	}
	out, err := kubectl(t, nil, args...)
	answer := strings.TrimSpace(out)
	var exit *exec.ExitError
	switch {
	case err == nil && answer == "yes":
		return true
	case errors.As(err, &exit) && exit.ExitCode() == 1 && strings.HasPrefix(answer, "no"):
		return false
	}
	t.Fatalf("can-i %s: answer %q, %v", a, answer, err)
	return false
}

// TestLeastPrivilege applies the rendered chart to a namespace and asks the
// API server what its service account may do: every verb spawnerd uses is
// allowed, and what it does not use is refused.
func TestLeastPrivilege(t *testing.T) {
	// What spawnerd needs in its notebook namespace, in either mode.
	uses := func(ns string) []access {
		var out []access
		for _, v := range []string{"get", "list", "watch", "create", "patch", "delete"} {
			out = append(out, access{v, "pods", ns, true})
		}
		for _, v := range []string{"get", "list", "watch"} {
			out = append(out, access{v, "events", ns, true})
		}
		for _, r := range []string{"persistentvolumeclaims", "services"} {
			out = append(out, access{"get", r, ns, true}, access{"create", r, ns, true})
		}
		return out
	}
	// What it never needs, wherever it is asked.
	never := func(ns string) []access {
		return []access{
			{"update", "pods", ns, false},
			{"deletecollection", "pods", ns, false},
			{"create", "pods/exec", ns, false},
			{"create", "pods/attach", ns, false},
			{"create", "pods/portforward", ns, false},
			{"create", "pods/eviction", ns, false},
			{"get", "pods/log", ns, false},
			{"update", "pods/status", ns, false},
			{"get", "secrets", ns, false},
			{"list", "secrets", ns, false},
			{"list", "configmaps", ns, false},
			{"create", "events", ns, false},
			{"delete", "events", ns, false},
			{"delete", "persistentvolumeclaims", ns, false},
			{"update", "persistentvolumeclaims", ns, false},
			{"delete", "services", ns, false},
			{"patch", "services", ns, false},
			{"create", "serviceaccounts/token", ns, false},
			{"create", "deployments.apps", ns, false},
			{"create", "jobs.batch", ns, false},
			{"create", "roles.rbac.authorization.k8s.io", ns, false},
			{"create", "rolebindings.rbac.authorization.k8s.io", ns, false},
			{"delete", "leases.coordination.k8s.io", ns, false},
			{"*", "*", ns, false},
		}
	}
	// Cluster-wide: never in either mode.
	clusterNever := []access{
		{"list", "nodes", "", false},
		{"get", "nodes", "", false},
		{"delete", "namespaces", "", false},
		{"list", "namespaces", "", false},
		{"create", "clusterroles.rbac.authorization.k8s.io", "", false},
		{"create", "persistentvolumes", "", false},
		{"list", "secrets", "*", false},
		{"create", "certificatesigningrequests.certificates.k8s.io", "", false},
	}
	leases := func(ns string) []access {
		return []access{
			{"get", "leases.coordination.k8s.io", ns, true},
			{"list", "leases.coordination.k8s.io", ns, true},
			{"watch", "leases.coordination.k8s.io", ns, true},
			{"create", "leases.coordination.k8s.io", ns, true},
			{"update", "leases.coordination.k8s.io", ns, true},
		}
	}

	cases := []struct {
		name  string
		flags []string
		// checks gets the release namespace and a namespace of no one.
		checks func(ns, other string) []access
	}{
		{
			name: "namespaced",
			checks: func(ns, other string) []access {
				c := append(uses(ns), never(ns)...)
				c = append(c, leases(ns)...)
				c = append(c, clusterNever...)
				return append(c,
					// Nothing outside its namespace.
					access{"list", "pods", "*", false},
					access{"create", "pods", other, false},
					access{"list", "events", other, false},
					access{"get", "leases.coordination.k8s.io", other, false},
					access{"create", "namespaces", "", false},
					access{"get", "namespaces", "", false},
				)
			},
		},
		{
			name:  "user namespaces",
			flags: []string{"--set", "userNamespaces.enabled=true"},
			checks: func(ns, other string) []access {
				c := append(uses(ns), uses(other)...)
				c = append(c, never(ns)...)
				c = append(c, never(other)...)
				c = append(c, leases(ns)...)
				c = append(c, clusterNever...)
				return append(c,
					// The informers watch every namespace; namespaces are created, never changed.
					access{"list", "pods", "*", true},
					access{"watch", "events", "*", true},
					access{"create", "namespaces", "", true},
					access{"get", "namespaces", "", true},
					access{"update", "namespaces", "", false},
					// Leases only where spawnerd runs.
					access{"get", "leases.coordination.k8s.io", other, false},
					access{"update", "leases.coordination.k8s.io", other, false},
				)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			apply(t, mustRender(t, ns, tc.flags...))
			waitForRBAC(t, ns)
			for _, a := range tc.checks(ns, "someone-else") {
				if got := canI(t, ns, a); got != a.want {
					t.Errorf("can %s: %v, want %v", a, got, a.want)
				}
			}
		})
	}
}

// waitForRBAC waits until the authorizer's caches hold the chart's bindings,
// so that a refusal means "not granted" rather than "not yet".
func waitForRBAC(t *testing.T, ns string) {
	t.Helper()
	first := access{"get", "pods", ns, true}
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(context.Context) (bool, error) {
		return canI(t, ns, first), nil
	})
	if err != nil {
		t.Fatalf("the service account never got %s: %v", first, err)
	}
}
