package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/lifecycle"
)

// TestSpawnerdRunsWithTheChart runs the real binary the way the chart's
// Deployment would, on this machine: the container's args, the ConfigMap
// and Secret files at their mount paths (moved into a temporary folder), and
// the chart's service account's token. It must become ready (its informers
// list and watch with that RBAC alone) and start and stop a server with a
// volume claim and a service, signed with the chart's shared secret.
func TestSpawnerdRunsWithTheChart(t *testing.T) {
	values := []string{
		"--set", "spawnerConfig.kubespawner.storage_pvc_ensure=true",
		"--set", "spawnerConfig.kubespawner.storage_capacity=1Gi",
		"--set", "spawnerConfig.kubespawner.services_enabled=true",
		"--set", "spawnerConfig.kubespawner.delete_grace_period=1",
		"--set-json", `spawnerConfig.kubespawner.cmd=["jupyterhub-singleuser"]`,
	}
	for _, tc := range []struct {
		name           string
		userNamespaces bool
	}{
		{"namespaced", false},
		{"user namespaces", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			m := mustRender(t, ns, append(values, "--set", fmt.Sprintf("userNamespaces.enabled=%t", tc.userNamespaces))...)
			apply(t, m)
			waitForRBAC(t, ns)

			d := startFromChart(t, ns, m)
			user := "alice"
			var started serverModel
			if code := d.call(t, http.MethodPost, harness.ServerPath(user, ""), user, startBody(user), &started); code != http.StatusAccepted && code != http.StatusOK {
				t.Fatalf("start: status %d, %+v", code, started)
			}
			running := d.waitStatus(t, user, "running")
			if !tc.userNamespaces && running.Namespace != ns {
				t.Errorf("server in namespace %q, want the release's %q", running.Namespace, ns)
			}
			if tc.userNamespaces {
				// The user's own namespace, created by spawnerd.
				t.Cleanup(func() {
					_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), running.Namespace, metav1.DeleteOptions{})
				})
				if running.Namespace == ns {
					t.Errorf("server in the release namespace, want a user namespace")
				}
				if _, err := env.Client.CoreV1().Namespaces().Get(context.Background(), running.Namespace, metav1.GetOptions{}); err != nil {
					t.Errorf("user namespace: %v", err)
				}
			}
			ctx := context.Background()
			// The server's claims; the chart's own history claim aside.
			pvcs, err := env.Client.CoreV1().PersistentVolumeClaims(running.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name!=spawnerd"})
			if err != nil {
				t.Fatal(err)
			}
			if len(pvcs.Items) != 1 {
				t.Errorf("volume claims in %s: %v, want one", running.Namespace, names(pvcs.Items))
			}
			svcs, err := env.Client.CoreV1().Services(running.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			owned := 0
			for _, s := range svcs.Items {
				for _, o := range s.OwnerReferences {
					if o.Kind == "Pod" && o.Name == running.Pod {
						owned++
					}
				}
			}
			if owned != 1 {
				t.Errorf("%d services in %s are owned by pod %s, want one", owned, running.Namespace, running.Pod)
			}

			if code := d.call(t, http.MethodDelete, harness.ServerPath(user, ""), user, nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
				t.Fatalf("stop: status %d", code)
			}
			env.WaitForPodGone(t, running.Namespace, running.Pod)
		})
	}
}

func names(pvcs []corev1.PersistentVolumeClaim) []string {
	var out []string
	for _, p := range pvcs {
		out = append(out, p.Name)
	}
	return out
}

// chartSpawnerd is spawnerd started from the chart's Deployment.
type chartSpawnerd struct {
	url    string
	secret []byte
	proc   *harness.Process
	client *apiclient.Client
}

func startFromChart(t *testing.T, ns string, m manifest) *chartSpawnerd {
	t.Helper()
	return startFromChartWith(t, ns, m, nil)
}

// startFromChartWith is startFromChart with some flags' values replaced
// (flag name with its dashes → value), e.g. a listen address of this machine.
func startFromChartWith(t *testing.T, ns string, m manifest, override map[string]string) *chartSpawnerd {
	t.Helper()
	dep := get[appsv1.Deployment](t, m, "Deployment", release)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	dir := t.TempDir()

	// Each mount becomes a folder holding the files the kubelet would project.
	moved := map[string]string{}
	var secret []byte
	for _, vm := range c.VolumeMounts {
		local := filepath.Join(dir, vm.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		moved[vm.MountPath] = local
		files := map[string][]byte{}
		for _, v := range pod.Volumes {
			if v.Name != vm.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				for k, s := range get[corev1.ConfigMap](t, m, "ConfigMap", v.ConfigMap.Name).Data {
					files[k] = []byte(s)
				}
			case v.Secret != nil:
				s := get[corev1.Secret](t, m, "Secret", v.Secret.SecretName)
				files, secret = s.Data, s.Data["shared-secret"]
			case v.PersistentVolumeClaim != nil:
				// A new claim: an empty folder (the SQLite history's).
			default:
				t.Fatalf("volume %s: only ConfigMap, Secret and claim volumes are expected", v.Name)
			}
		}
		for k, data := range files {
			if err := os.WriteFile(filepath.Join(local, k), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(secret) == 0 {
		t.Fatal("the Deployment mounts no shared secret")
	}

	port := harness.FreePort(t)
	var args []string
	for _, a := range c.Args {
		flag, value, ok := strings.Cut(a, "=")
		switch {
		case ok && flag == "--listen":
			a = fmt.Sprintf("--listen=127.0.0.1:%d", port)
		case ok && override[flag] != "":
			a = flag + "=" + override[flag]
		case ok:
			// A path under a mount, also as a SQLite DSN (sqlite:///var/lib/...).
			scheme := ""
			if path, dsn := strings.CutPrefix(value, "sqlite://"); dsn {
				scheme, value = "sqlite://", path
			}
			for mount, local := range moved {
				if strings.HasPrefix(value, mount+"/") {
					a = flag + "=" + scheme + local + strings.TrimPrefix(value, mount)
				}
			}
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+serviceAccountKubeconfig(t, ns, pod.ServiceAccountName, dir))

	d := &chartSpawnerd{url: fmt.Sprintf("http://127.0.0.1:%d", port), secret: secret}
	var err error
	if d.client, err = apiclient.New(d.url, apiclient.User{Name: "admin", Admin: true}, apiclient.SharedSecret(secret)); err != nil {
		t.Fatal(err)
	}
	// The downward API's and the rendered Secrets' values, as the kubelet
	// would set them; a value naming a mount, moved with it.
	var procEnv []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			value := e.Value
			if local, ok := moved[value]; ok {
				value = local
			}
			procEnv = append(procEnv, e.Name+"="+value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			procEnv = append(procEnv, e.Name+"="+ns)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			procEnv = append(procEnv, e.Name+"="+string(get[corev1.Secret](t, m, "Secret", ref.Name).Data[ref.Key]))
		default:
			t.Fatalf("env %s: only values, the pod's namespace and the chart's Secret are expected", e.Name)
		}
	}
	d.proc = harness.StartProcess(t, "spawnerd", procEnv, spawnerd, args...)
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		if d.proc.Exited() {
			return false, fmt.Errorf("spawnerd exited:\n%s", d.proc.Log())
		}
		return d.client.Readyz(ctx) == nil, nil
	})
	if err != nil {
		t.Fatalf("spawnerd with the chart's args %q never became ready: %v", args, err)
	}
	return d
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// service account, with a token from the TokenRequest API as a pod gets.
func serviceAccountKubeconfig(t *testing.T, ns, sa, dir string) string {
	t.Helper()
	tok, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dev"] = &clientcmdapi.Cluster{Server: env.Cluster.APIServerURL(), CertificateAuthority: env.Cluster.CAFile()}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: "sa", Namespace: ns}
	cfg.CurrentContext = "sa"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// serverModel is spawnerd's server model.
type serverModel = lifecycle.Server

func startBody(user string) map[string]any {
	return map[string]any{
		"env": map[string]string{
			"JUPYTERHUB_API_TOKEN":      "tok-" + user,
			"JUPYTERHUB_USER":           user,
			"JUPYTERHUB_SERVER_NAME":    "",
			"JUPYTERHUB_SERVICE_PREFIX": "/user/" + user + "/",
			"JUPYTERHUB_API_URL":        "http://hub:8081/hub/api",
		},
		"api_token": "tok-" + user,
	}
}

// call sends a request signed with the chart's shared secret, as the hub
// does, and decodes a JSON answer into out (if not nil).
func (d *chartSpawnerd) call(t *testing.T, method, path, user string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	code, data, err := d.client.Do(context.Background(), method, path, rd, apiclient.User{Name: user})
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, path, data, err)
		}
	}
	return code
}

func (d *chartSpawnerd) waitStatus(t *testing.T, user, status string) serverModel {
	t.Helper()
	var m serverModel
	c := d.client.As(apiclient.User{Name: user})
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.Poll(ctx, user, "", lifecycle.Hint{})
		if err != nil {
			return false, fmt.Errorf("poll: %w", err)
		}
		m = *got
		return m.Status == status, nil
	})
	if err != nil {
		t.Fatalf("server of %s never became %s (last %+v): %v", user, status, m, err)
	}
	return m
}
