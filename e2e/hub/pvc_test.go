package hub_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dsmlp/spawner/e2e/harness"
)

// storageConfig gives every server a PVC it mounts. The dev cluster has no
// provisioner, so each test pre-binds a PersistentVolume to the PVC name it
// expects: a pod whose PVC did not bind would never be scheduled, so a ready
// server proves that it got exactly that PVC.
const storageConfig = `
  storage_pvc_ensure: true
  storage_capacity: 1Gi
  storage_class: ""
  volumes: [{name: home, persistentVolumeClaim: {claimName: "{pvc_name}"}}]
  volume_mounts: [{name: home, mountPath: /home/jovyan}]
`

// pvcStack is a stack whose spawnerd reads a configuration file the test
// may rewrite before restarting it (the last --config flag wins).
type pvcStack struct {
	*stack
	configPath string
}

func newPVCStack(t *testing.T, extra string) *pvcStack {
	t.Helper()
	ns := env.Namespace(t)
	path := filepath.Join(t.TempDir(), "spawner.yaml")
	s := &pvcStack{configPath: path}
	s.writeConfig(t, ns, extra)
	proxy := harness.StartProxy(t)
	hubPort := harness.FreePort(t)
	hubToken := fmt.Sprintf("hub-token-%d", time.Now().UnixNano())
	api := env.StartSpawnerd(t, bin, harness.SpawnerdOptions{
		Config: fmt.Sprintf(spawnerConfig, ns),
		Args: []string{"--config", path, "--hub-api-url", fmt.Sprintf("http://127.0.0.1:%d/hub/api", hubPort),
			"--proxy-api-url", proxy.APIURL},
		Env: []string{"SPAWNERD_HUB_TOKEN=" + hubToken, "CONFIGPROXY_AUTH_TOKEN=" + proxy.Token},
	})
	hub := env.StartHub(t, harness.HubOptions{
		Proxy: proxy, Spawnerd: api.URL, Secret: api.Secret, HubToken: hubToken, Port: hubPort,
		ExtraEnv: []string{"HUB_POLL_INTERVAL=600", "HUB_START_TIMEOUT=90"},
	})
	s.stack = &stack{ns: ns, proxy: proxy, api: api, hub: hub}
	return s
}

func (s *pvcStack) writeConfig(t *testing.T, ns, extra string) {
	t.Helper()
	cfg := fmt.Sprintf(spawnerConfig, ns) + storageConfig + extra
	if err := os.WriteFile(s.configPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// preparePV creates a PersistentVolume bound in advance to ns/claim, and
// removes it when the test ends.
func preparePV(t *testing.T, ns, claim string) {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}},
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PV for %s/%s: %v", ns, claim, err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

// requireBoundAndMounted checks the PVC is bound and the server's pod mounts it.
func requireBoundAndMounted(t *testing.T, ns, pod, claim string) {
	t.Helper()
	pvc, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("PVC %s/%s: %v", ns, claim, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("PVC %s/%s is %s, want Bound", ns, claim, pvc.Status.Phase)
	}
	p, err := env.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s/%s: %v", ns, pod, err)
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			if v.PersistentVolumeClaim.ClaimName != claim {
				t.Fatalf("pod %s mounts PVC %s, want %s", pod, v.PersistentVolumeClaim.ClaimName, claim)
			}
			return
		}
	}
	t.Fatalf("pod %s mounts no PVC", pod)
}

func pvcExists(t *testing.T, ns, claim string) bool {
	t.Helper()
	pvc, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("PVC %s/%s: %v", ns, claim, err)
	}
	return pvc.DeletionTimestamp == nil
}

func waitPVCGone(t *testing.T, ns, claim string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), harness.Interval, harness.Timeout, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("PVC %s/%s was never deleted", ns, claim)
	}
}

// removeServer deletes a named server through the hub's REST API, as the
// hub's UI and z2jh's admins do.
func (s *pvcStack) removeServer(t *testing.T, user, server string) {
	t.Helper()
	if code := s.hub.Do(http.MethodDelete, harness.ServerAPIPath(user, server), map[string]any{"remove": true}, nil); code != http.StatusNoContent && code != http.StatusAccepted {
		t.Fatalf("hub remove %s/%s: %d", user, server, code)
	}
}

// waitDeleteForever waits for spawnerd's log line of the delete forever
// of user/server and returns it.
func (s *pvcStack) waitDeleteForever(t *testing.T, user, server string) string {
	t.Helper()
	line, ok := s.api.WaitForLogLine(harness.Timeout, `"msg":"delete forever"`, fmt.Sprintf(`"user":%q`, user), fmt.Sprintf(`"server":%q`, server))
	if !ok {
		t.Fatalf("spawnerd never logged the delete forever of %s/%s:\n%s", user, server, s.api.Log())
	}
	return line
}

// TestRemovingANamedServerDeletesItsPVC is zero-to-jupyterhub#1214: the
// hub's remove of a named server calls delete_forever, and its PVC goes;
// the default server's PVC stays until the user is deleted.
func TestRemovingANamedServerDeletesItsPVC(t *testing.T) {
	s := newPVCStack(t, "")
	preparePV(t, s.ns, "claim-pia")
	preparePV(t, s.ns, "claim-pia--work")
	s.start(t, "pia", "", nil)
	s.start(t, "pia", "work", nil)
	requireBoundAndMounted(t, s.ns, "jupyter-pia", "claim-pia")
	requireBoundAndMounted(t, s.ns, "jupyter-pia--work", "claim-pia--work")
	if got := s.hub.Servers("pia")["work"].State["pvc_name"]; got != "claim-pia--work" {
		t.Fatalf("hub state pvc_name %q, want claim-pia--work", got)
	}

	s.removeServer(t, "pia", "work")
	waitPVCGone(t, s.ns, "claim-pia--work")
	env.WaitForPodGone(t, s.ns, "jupyter-pia--work")
	if line := s.waitDeleteForever(t, "pia", "work"); !strings.Contains(line, `"result":"deleted"`) || !strings.Contains(line, `"pvc":"claim-pia--work"`) {
		t.Errorf("spawnerd logged %s", line)
	}
	if _, ok := s.hub.Servers("pia")["work"]; ok {
		t.Error("the hub still lists the removed server")
	}
	// The default server and its storage are untouched.
	if !pvcExists(t, s.ns, "claim-pia") {
		t.Fatal("the default server's PVC went with the named server's")
	}
	s.waitReachable(t, "pia", "")

	// Deleting the user stops the default server, then deletes it forever.
	if code := s.hub.Do(http.MethodDelete, "/users/pia", nil, nil); code != http.StatusNoContent {
		t.Fatalf("hub delete user: %d", code)
	}
	waitPVCGone(t, s.ns, "claim-pia")
	env.WaitForPodGone(t, s.ns, "jupyter-pia")
	if line := s.waitDeleteForever(t, "pia", ""); !strings.Contains(line, `"result":"deleted"`) {
		t.Errorf("spawnerd logged %s", line)
	}
}

// TestRemovingANamedServerKeepsSharedOrProtectedPVCs: delete_pvc false
// keeps every PVC, and a pvc_name_template without {user_server} makes a
// named server share the default server's PVC, which is kept (#873).
func TestRemovingANamedServerKeepsSharedOrProtectedPVCs(t *testing.T) {
	for name, tc := range map[string]struct {
		extra, user, claim, reason string
	}{
		"delete_pvc false": {"  delete_pvc: false\n", "quinn", "claim-quinn--work", "delete_pvc is false"},
		"shared template":  {"  pvc_name_template: claim-{username}\n", "ray", "claim-ray", "no {user_server}"},
	} {
		t.Run(name, func(t *testing.T) {
			s := newPVCStack(t, tc.extra)
			preparePV(t, s.ns, tc.claim)
			s.start(t, tc.user, "work", nil)
			requireBoundAndMounted(t, s.ns, "jupyter-"+tc.user+"--work", tc.claim)

			s.removeServer(t, tc.user, "work")
			line := s.waitDeleteForever(t, tc.user, "work")
			if !strings.Contains(line, `"result":"kept"`) || !strings.Contains(line, tc.reason) {
				t.Errorf("spawnerd logged %s, want kept because %s", line, tc.reason)
			}
			env.WaitForPodGone(t, s.ns, "jupyter-"+tc.user+"--work")
			if !pvcExists(t, s.ns, tc.claim) {
				t.Fatalf("PVC %s was deleted", tc.claim)
			}
		})
	}
}

// TestRememberPVCNameAcrossTemplateChange: once a server has a PVC, a new
// pvc_name_template does not move it to a new, empty one; with
// remember_pvc_name false it does (KubeSpawner 7's remember_pvc_name).
func TestRememberPVCNameAcrossTemplateChange(t *testing.T) {
	s := newPVCStack(t, "")
	preparePV(t, s.ns, "claim-sam")
	s.start(t, "sam", "", nil)
	requireBoundAndMounted(t, s.ns, "jupyter-sam", "claim-sam")
	restartWith := func(extra string) {
		if code := s.hub.Do(http.MethodDelete, harness.ServerAPIPath("sam", ""), nil, nil); code != http.StatusNoContent && code != http.StatusAccepted {
			t.Fatalf("hub stop: %d", code)
		}
		s.hub.WaitGone("sam", "")
		env.WaitForPodGone(t, s.ns, "jupyter-sam")
		s.writeConfig(t, s.ns, extra)
		s.api.Restart(t)
	}

	restartWith("  pvc_name_template: home-{username}\n")
	s.start(t, "sam", "", nil)
	requireBoundAndMounted(t, s.ns, "jupyter-sam", "claim-sam")
	if pvcExists(t, s.ns, "home-sam") {
		t.Error("a PVC of the new template was created beside the remembered one")
	}
	if got := s.hub.Servers("sam")[""].State["pvc_name"]; got != "claim-sam" {
		t.Errorf("hub state pvc_name %q, want claim-sam", got)
	}

	preparePV(t, s.ns, "home-sam")
	restartWith("  pvc_name_template: home-{username}\n  remember_pvc_name: false\n")
	s.start(t, "sam", "", nil)
	requireBoundAndMounted(t, s.ns, "jupyter-sam", "home-sam")
	if got := s.hub.Servers("sam")[""].State["pvc_name"]; got != "home-sam" {
		t.Errorf("hub state pvc_name %q, want home-sam", got)
	}
}
