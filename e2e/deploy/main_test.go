// Package deploy_test checks what an operator deploys: the Helm chart in
// deploy/helm/spawnerd renders to the committed plain manifests, its objects
// apply to a real API server, its RBAC grants spawnerd exactly what it uses,
// spawnerd runs with the chart's config, secret and service account, and the
// hub-side values fit the chart.
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/dsmlp/spawner/e2e/harness"
)

// release is the Helm release name every render uses, as the plain manifests do.
const release = "spawnerd"

var (
	env      *harness.Env
	helmBin  string
	spawnerd string
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m, &env, nil, func(e *harness.Env) error {
		helmBin = filepath.Join(e.BinDir, "helm")
		if _, err := os.Stat(helmBin); err != nil {
			return fmt.Errorf("helm is not in %s (hack/tools.sh builds it): %w", e.BinDir, err)
		}
		dir, err := os.MkdirTemp("", "deploy-bin-")
		if err != nil {
			return err
		}
		spawnerd, err = harness.BuildBinary(e.RepoDir, "./cmd/spawnerd", dir)
		return err
	}))
}

func chartDir() string { return filepath.Join(env.RepoDir, "deploy", "helm", "spawnerd") }

// helm runs the pinned helm with its state in a temporary folder and the dev
// cluster's kubeconfig; it returns stdout, and stderr in the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+env.Cluster.Kubeconfig(),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// render is `helm template` of the chart as release "spawnerd" in ns with
// extra flags (--set ...).
func render(t *testing.T, ns string, flags ...string) (manifest, error) {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, chartDir(), "--namespace", ns}, flags...)...)
	if err != nil {
		return manifest{}, err
	}
	return decode(t, []byte(out)), nil
}

func mustRender(t *testing.T, ns string, flags ...string) manifest {
	t.Helper()
	m, err := render(t, ns, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// kubectl runs the pinned kubectl against the dev cluster as its admin.
func kubectl(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.BinDir, "kubectl"), append([]string{"--kubeconfig", env.Cluster.Kubeconfig()}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), err
}

// apply creates the rendered objects and removes the cluster-wide ones when
// the test ends (the test namespace takes the others with it).
func apply(t *testing.T, m manifest) {
	t.Helper()
	if out, err := kubectl(t, m.raw, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying the rendered chart: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		for _, o := range m.objs {
			if o.GetNamespace() == "" {
				_, _ = kubectl(t, nil, "delete", o.GetKind(), o.GetName(), "--ignore-not-found", "--wait=false")
			}
		}
	})
}

// manifest is a rendered multi-document YAML stream and its objects.
type manifest struct {
	raw  []byte
	objs []*unstructured.Unstructured
}

func decode(t *testing.T, data []byte) manifest {
	t.Helper()
	m := manifest{raw: data}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatalf("decoding rendered manifests: %v", err)
		}
		if obj != nil {
			m.objs = append(m.objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// find returns the object of that kind and name, or nil.
func (m manifest) find(kind, name string) *unstructured.Unstructured {
	for _, o := range m.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// ids lists the objects as kind/namespace/name, in order.
func (m manifest) ids() []string {
	var out []string
	for _, o := range m.objs {
		out = append(out, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// get converts the named object to its typed form, failing the test when absent.
func get[T any](t *testing.T, m manifest, kind, name string) *T {
	t.Helper()
	u := m.find(kind, name)
	if u == nil {
		t.Fatalf("no %s %q among %v", kind, name, m.ids())
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("converting %s %s: %v", kind, name, err)
	}
	return out
}
