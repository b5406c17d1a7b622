package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsmlp/spawner/spawner"
)

// ErrActive: the server still has a pod; it must be stopped first.
var ErrActive = errors.New("the server is still running or starting; stop it first")

// Results of DeleteForever.
const (
	// StorageDeleted: the PVC's deletion was requested (or was already under way).
	StorageDeleted = "deleted"
	// StorageAbsent: there was no such PVC; nothing to do.
	StorageAbsent = "absent"
	// StorageKept: the PVC was left alone; Reason says why.
	StorageKept = "kept"
)

// SavedState is what the hub saved of a server (KubeSpawner's state keys)
// that spawnerd reads back.
type SavedState struct {
	// PVCName is the state's pvc_name, "" if none.
	PVCName string
	// Namespace is the state's namespace, "" if none.
	Namespace string
	// UserID is the hub's user id, for {userid} in the name templates.
	UserID int
}

// StorageDeletion is what DeleteForever did with a server's PVC.
type StorageDeletion struct {
	User      string `json:"user"`
	Server    string `json:"server"`
	PVC       string `json:"pvc"`
	Namespace string `json:"namespace"`
	// Result is deleted, absent or kept.
	Result string `json:"result"`
	// Reason says why a PVC was kept.
	Reason string `json:"reason,omitempty"`
}

// DeleteForever is KubeSpawner's delete_forever, which the hub calls once
// a user or a named server is deleted (after it stopped): it deletes the
// server's PVC. As in KubeSpawner 7.1 (spawner.py delete_forever):
//   - with delete_pvc false nothing is deleted;
//   - a named server whose pvc_name_template lacks the literal
//     "{user_server}" shares the default server's PVC, which is kept (#873);
//   - the PVC is the saved pvc_name when remember_pvc_name is set (load_state),
//     else pvc_name_template's expansion, in the saved namespace if any;
//   - a PVC that is already gone is success.
//
// It uses the base settings, as a hub's freshly loaded spawner does. A PVC
// whose annotations name another user is kept: state cannot make one user's
// deletion remove another's storage. A server that still has a pod gets
// ErrActive.
func (m *Manager) DeleteForever(ctx context.Context, key Key, saved SavedState) (*StorageDeletion, error) {
	if srv := m.Server(key, Hint{Namespace: saved.Namespace}); srv.Status == StatusPending || srv.Status == StatusRunning {
		return nil, fmt.Errorf("deleting %s forever: %w", describeKey(key), ErrActive)
	}
	names, err := spawner.NewNames(m.base, key.User, key.Server, saved.UserID, "")
	if err != nil {
		return nil, fmt.Errorf("naming the PVC of %s: %w", describeKey(key), err)
	}
	d := &StorageDeletion{User: key.User, Server: key.Server, PVC: names.PVCName, Namespace: names.Namespace}
	if saved.PVCName != "" && m.base.RememberPVCName {
		d.PVC = saved.PVCName
	}
	if saved.Namespace != "" {
		d.Namespace = saved.Namespace
	}
	log := m.log.With(zap.String("user", key.User), zap.String("server", key.Server),
		zap.String("pvc", d.PVC), zap.String("namespace", d.Namespace))
	switch {
	case !m.base.DeletePVC:
		d.Result, d.Reason = StorageKept, "delete_pvc is false"
	case key.Server != "" && !strings.Contains(m.base.PVCNameTemplate, "{user_server}"):
		d.Result, d.Reason = StorageKept, "pvc_name_template has no {user_server}: the named server shares the default server's PVC"
	default:
		if d.Result, d.Reason, err = m.deletePVC(ctx, key, d.Namespace, d.PVC); err != nil {
			return nil, err
		}
	}
	m.forget(key)
	log.Info("delete forever", zap.String("result", d.Result), zap.String("reason", d.Reason))
	return d, nil
}

// deletePVC deletes the PVC unless it belongs to another user, with a UID
// precondition so a PVC re-created in between is not touched.
func (m *Manager) deletePVC(ctx context.Context, key Key, namespace, name string) (result, reason string, err error) {
	pvcs := m.client.CoreV1().PersistentVolumeClaims(namespace)
	pvc, err := pvcs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return StorageAbsent, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading PVC %s/%s: %w", namespace, name, err)
	}
	if owner := pvcUser(pvc); owner != "" && owner != key.User {
		return StorageKept, fmt.Sprintf("the PVC belongs to user %q", owner), nil
	}
	if pvc.DeletionTimestamp != nil {
		return StorageDeleted, "", nil
	}
	uid := pvc.UID
	err = pvcs.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		return StorageDeleted, "", nil
	case apierrors.IsNotFound(err):
		return StorageAbsent, "", nil
	}
	return "", "", fmt.Errorf("deleting PVC %s/%s: %w", namespace, name, err)
}

// pvcUser is the hub user a PVC's annotations name, "" if none.
func pvcUser(pvc *corev1.PersistentVolumeClaim) string {
	if u := pvc.Annotations[spawner.AnnotationSpawnerUser]; u != "" {
		return u
	}
	return pvc.Annotations[spawner.AnnotationUser]
}

// ensurePVC creates the PVC; one that exists already is the server's. A
// quota refusal of a PVC that exists is fine too, as in KubeSpawner's
// _make_create_pvc_request: quota is checked before existence.
func (m *Manager) ensurePVC(ctx context.Context, pvc *corev1.PersistentVolumeClaim, log *zap.Logger) error {
	pvcs := m.client.CoreV1().PersistentVolumeClaims(pvc.Namespace)
	_, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsForbidden(err) {
		if _, gerr := pvcs.Get(ctx, pvc.Name, metav1.GetOptions{}); gerr == nil {
			log.Info("start: PVC exists, though its quota is reached", zap.String("pvc", pvc.Name))
			return nil
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PVC %s: %w", pvc.Name, classify(err))
	}
	log.Info("start: PVC ensured", zap.String("pvc", pvc.Name))
	return nil
}

// forget drops what this process remembers of a server deleted forever.
func (m *Manager) forget(key Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sp := m.spawns[key]; sp != nil {
		if done, _, _ := sp.result(); !done {
			return
		}
		delete(m.spawns, key)
	}
	delete(m.observed, key)
}

func describeKey(k Key) string {
	if k.Server == "" {
		return fmt.Sprintf("the default server of %q", k.User)
	}
	return fmt.Sprintf("server %q of %q", k.Server, k.User)
}
