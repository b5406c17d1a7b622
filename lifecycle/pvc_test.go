package lifecycle

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

const pvcTestConfig = `
kubespawner:
  namespace: ns1
  storage_pvc_ensure: true
  storage_capacity: 1Gi
  volumes: [{name: home, persistentVolumeClaim: {claimName: "{pvc_name}"}}]
  volume_mounts: [{name: home, mountPath: /home/jovyan}]
`

func newPVCManager(t *testing.T, extra string, objects ...runtime.Object) (*Manager, *fake.Clientset, *fakeWatcher) {
	t.Helper()
	return newManagerWith(t, pvcTestConfig+extra, objects...)
}

func newManagerWith(t *testing.T, config string, objects ...runtime.Object) (*Manager, *fake.Clientset, *fakeWatcher) {
	t.Helper()
	cfg, err := spawner.Parse([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objects...)
	w := newFakeWatcher()
	m, err := New(client, cfg, w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m, client, w
}

func testPVC(ns, name, user string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}}
	if user != "" {
		pvc.Annotations = map[string]string{spawner.AnnotationUser: user}
	}
	return pvc
}

func pvcNames(t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	list, err := client.CoreV1().PersistentVolumeClaims("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// TestDeleteForeverFollowsKubeSpawner checks KubeSpawner 7.1's
// delete_forever rules (spawner.py 3921-3959) and load_state's
// remember_pvc_name (2617-2621).
func TestDeleteForeverFollowsKubeSpawner(t *testing.T) {
	existing := func() []runtime.Object {
		return []runtime.Object{
			testPVC("ns1", "claim-alice", "alice"),
			testPVC("ns1", "claim-alice--work", "alice"),
			testPVC("ns1", "claim-old-alice", "alice"),
			testPVC("ns2", "claim-alice", "alice"),
			testPVC("ns1", "claim-bob", "bob"),
			testPVC("ns1", "claim-7", ""),
		}
	}
	all := []string{"ns1/claim-7", "ns1/claim-alice", "ns1/claim-alice--work", "ns1/claim-bob", "ns1/claim-old-alice", "ns2/claim-alice"}
	without := func(gone string) []string {
		var out []string
		for _, n := range all {
			if n != gone {
				out = append(out, n)
			}
		}
		return out
	}
	for name, tc := range map[string]struct {
		config     string
		key        Key
		saved      SavedState
		wantResult string
		wantPVC    string
		wantLeft   []string
	}{
		"default server: its PVC": {
			key: Key{User: "alice"}, wantResult: StorageDeleted, wantPVC: "claim-alice", wantLeft: without("ns1/claim-alice"),
		},
		"named server with {user_server}": {
			key: Key{User: "alice", Server: "work"}, wantResult: StorageDeleted, wantPVC: "claim-alice--work", wantLeft: without("ns1/claim-alice--work"),
		},
		"no such PVC is success": {
			key: Key{User: "carol"}, wantResult: StorageAbsent, wantPVC: "claim-carol", wantLeft: all,
		},
		"delete_pvc false keeps it": {
			config: "  delete_pvc: false\n", key: Key{User: "alice"}, wantResult: StorageKept, wantPVC: "claim-alice", wantLeft: all,
		},
		"named server sharing the default server's PVC (#873)": {
			config: "  pvc_name_template: claim-{username}\n", key: Key{User: "alice", Server: "work"},
			wantResult: StorageKept, wantPVC: "claim-alice", wantLeft: all,
		},
		"#873 is the literal {user_server}: {servername} alone does not count": {
			config: "  pvc_name_template: claim-{username}--{servername}\n", key: Key{User: "alice", Server: "work"},
			wantResult: StorageKept, wantPVC: "claim-alice--work", wantLeft: all,
		},
		"default server with a shared template is deleted": {
			config: "  pvc_name_template: claim-{username}\n", key: Key{User: "alice"},
			wantResult: StorageDeleted, wantPVC: "claim-alice", wantLeft: without("ns1/claim-alice"),
		},
		"remember_pvc_name: the saved name": {
			key: Key{User: "alice"}, saved: SavedState{PVCName: "claim-old-alice"},
			wantResult: StorageDeleted, wantPVC: "claim-old-alice", wantLeft: without("ns1/claim-old-alice"),
		},
		"remember_pvc_name false: the template's name": {
			config: "  remember_pvc_name: false\n", key: Key{User: "alice"}, saved: SavedState{PVCName: "claim-old-alice"},
			wantResult: StorageDeleted, wantPVC: "claim-alice", wantLeft: without("ns1/claim-alice"),
		},
		"the saved namespace": {
			key: Key{User: "alice"}, saved: SavedState{Namespace: "ns2"},
			wantResult: StorageDeleted, wantPVC: "claim-alice", wantLeft: without("ns2/claim-alice"),
		},
		"{userid} from the hub": {
			config: "  pvc_name_template: claim-{userid}\n", key: Key{User: "dave"}, saved: SavedState{UserID: 7},
			wantResult: StorageDeleted, wantPVC: "claim-7", wantLeft: without("ns1/claim-7"),
		},
		"another user's PVC is never deleted": {
			key: Key{User: "alice"}, saved: SavedState{PVCName: "claim-bob"},
			wantResult: StorageKept, wantPVC: "claim-bob", wantLeft: all,
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, client, _ := newPVCManager(t, tc.config, existing()...)
			got, err := m.DeleteForever(context.Background(), tc.key, tc.saved)
			if err != nil {
				t.Fatal(err)
			}
			if got.Result != tc.wantResult || got.PVC != tc.wantPVC {
				t.Errorf("got %+v, want result %s for PVC %s", got, tc.wantResult, tc.wantPVC)
			}
			if got.Result == StorageKept && got.Reason == "" {
				t.Errorf("kept without a reason: %+v", got)
			}
			if left := pvcNames(t, client); !equalStrings(left, tc.wantLeft) {
				t.Errorf("PVCs left %v, want %v", left, tc.wantLeft)
			}
			// Deleting again is harmless: the hub may retry.
			again, err := m.DeleteForever(context.Background(), tc.key, tc.saved)
			if err != nil {
				t.Fatalf("second call: %v", err)
			}
			if want := map[string]string{StorageDeleted: StorageAbsent}[tc.wantResult]; want != "" && again.Result != want {
				t.Errorf("second call %+v, want %s", again, want)
			}
		})
	}
}

func TestDeleteForeverRefusesAServerThatStillRuns(t *testing.T) {
	m, client, w := newPVCManager(t, "", testPVC("ns1", "claim-alice", "alice"))
	w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateRunning, Pod: runningPod("ns1", "jupyter-alice", "u1", "10.0.0.1")})
	_, err := m.DeleteForever(context.Background(), Key{User: "alice"}, SavedState{})
	if !errors.Is(err, ErrActive) {
		t.Fatalf("err = %v, want ErrActive", err)
	}
	if left := pvcNames(t, client); !equalStrings(left, []string{"ns1/claim-alice"}) {
		t.Errorf("PVCs left %v", left)
	}
	// Once the pod is gone the deletion goes ahead.
	w.set("ns1", "jupyter-alice", poll.Status{State: poll.StateAbsent})
	if got, err := m.DeleteForever(context.Background(), Key{User: "alice"}, SavedState{}); err != nil || got.Result != StorageDeleted {
		t.Fatalf("after the stop: %+v, %v", got, err)
	}
}

func TestDeleteForeverAPIErrorIsReturned(t *testing.T) {
	m, client, _ := newPVCManager(t, "", testPVC("ns1", "claim-alice", "alice"))
	client.PrependReactor("delete", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd unavailable"))
	})
	if _, err := m.DeleteForever(context.Background(), Key{User: "alice"}, SavedState{}); err == nil || !apierrors.IsInternalError(errors.Unwrap(err)) {
		t.Fatalf("err = %v, want the API server's error, wrapped", err)
	}
}

// TestStartRemembersThePVCName: with remember_pvc_name a saved pvc_name
// names the PVC and {pvc_name} in volumes, so a changed pvc_name_template
// does not orphan the user's storage (KubeSpawner load_state, 2617-2621).
func TestStartRemembersThePVCName(t *testing.T) {
	for name, tc := range map[string]struct {
		config, saved, want string
	}{
		"nothing saved: the template":         {"  pvc_name_template: home-{username}\n", "", "home-alice"},
		"saved name wins over a new template": {"  pvc_name_template: home-{username}\n", "claim-alice", "claim-alice"},
		"remember_pvc_name false: the template": {
			"  pvc_name_template: home-{username}\n  remember_pvc_name: false\n", "claim-alice", "home-alice",
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, client, _ := newPVCManager(t, tc.config)
			key := Key{User: "alice"}
			srv, err := m.Start(context.Background(), spawner.Request{User: "alice", SavedPVCName: tc.saved}, history.Actor{Kind: history.ActorUser, Name: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = m.Stop(context.Background(), key, Hint{}, true, time.Second, history.Actor{Kind: history.ActorHub})
			})
			if left := pvcNames(t, client); !equalStrings(left, []string{"ns1/" + tc.want}) {
				t.Errorf("PVCs %v, want ns1/%s", left, tc.want)
			}
			pod, err := client.CoreV1().Pods("ns1").Get(context.Background(), "jupyter-alice", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName; got != tc.want {
				t.Errorf("pod mounts %s, want %s", got, tc.want)
			}
			if srv.State["pvc_name"] != tc.want || m.Server(key, Hint{}).State["pvc_name"] != tc.want {
				t.Errorf("state %v, want pvc_name %s", srv.State, tc.want)
			}
		})
	}
}

// TestStatePVCNameOnlyForAnEnsuredPVC: a claim the pod mounts without
// storage_pvc_ensure may be shared; the state must not name it, or a later
// delete forever would delete it (KubeSpawner get_state, 2566-2570).
func TestStatePVCNameOnlyForAnEnsuredPVC(t *testing.T) {
	m, client, _ := newManagerWith(t, `
kubespawner:
  namespace: ns1
  volumes: [{name: home, persistentVolumeClaim: {claimName: shared-home}}]
  volume_mounts: [{name: home, mountPath: /home/jovyan}]
`)
	key := Key{User: "alice"}
	srv, err := m.Start(context.Background(), spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = m.Stop(context.Background(), key, Hint{}, true, time.Second, history.Actor{Kind: history.ActorHub})
	})
	if _, ok := srv.State["pvc_name"]; ok {
		t.Errorf("state %v names a PVC no spawn ensured", srv.State)
	}
	if left := pvcNames(t, client); len(left) != 0 {
		t.Errorf("PVCs created without storage_pvc_ensure: %v", left)
	}
}

// TestEnsurePVCQuotaRefusalOfAnExistingPVC: quota is checked before
// existence, so a 403 for a PVC that exists is fine, as in KubeSpawner's
// _make_create_pvc_request; for one that does not, it is ErrQuota.
func TestEnsurePVCQuotaRefusalOfAnExistingPVC(t *testing.T) {
	quota := func(client *fake.Clientset) {
		client.PrependReactor("create", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "persistentvolumeclaims"}, "claim-alice",
				errors.New("exceeded quota: storage, requested: requests.storage=1Gi, used: requests.storage=10Gi, limited: requests.storage=10Gi"))
		})
	}
	t.Run("exists", func(t *testing.T) {
		m, client, _ := newPVCManager(t, "", testPVC("ns1", "claim-alice", "alice"))
		quota(client)
		if _, err := m.Start(context.Background(), spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() {
			_, _ = m.Stop(context.Background(), Key{User: "alice"}, Hint{}, true, time.Second, history.Actor{Kind: history.ActorHub})
		})
	})
	t.Run("missing", func(t *testing.T) {
		m, client, _ := newPVCManager(t, "")
		quota(client)
		if _, err := m.Start(context.Background(), spawner.Request{User: "alice"}, history.Actor{Kind: history.ActorUser, Name: "alice"}); !errors.Is(err, ErrQuota) {
			t.Fatalf("start: %v, want ErrQuota", err)
		}
		if _, err := client.CoreV1().Pods("ns1").Get(context.Background(), "jupyter-alice", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a pod was created without its PVC: %v", err)
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
