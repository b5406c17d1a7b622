package lifecycle

import (
	"encoding/json"
	"fmt"
	"sync"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/serverid"
	"github.com/dsmlp/spawner/spawner"
)

// Hint is what the hub saved about a server (KubeSpawner's state: pod_name,
// namespace, and the pod's UID): where to look when the server's pod has no
// identity label, e.g. one made before spawnerd labelled pods so.
type Hint struct {
	Pod, Namespace string
	UID            types.UID
}

// Ownership returns the check the pod watcher applies before it deletes or
// reports a pod: the pod's identity must be whole (its key label matches
// its annotations) and its namespace one where the configuration can put
// that server's pod. A pod someone made by hand in another namespace, with
// a user's annotations, is nobody's server.
func Ownership(cfg *spawner.Config) func(*corev1.Pod) (bool, string) {
	return func(pod *corev1.Pod) (bool, string) {
		_, _, why := ownerOf(cfg, &pod.ObjectMeta)
		return why == "", why
	}
}

// ownerOf is the server a pod is for, when its identity is whole and the
// configuration can put that server's pod in the pod's namespace; else why
// it is nobody's.
func ownerOf(cfg *spawner.Config, pod *metav1.ObjectMeta) (user, server, why string) {
	user, server, why = identityOf(pod)
	if why == "" && !cfg.MayHold(user, server, 0, pod.Namespace) {
		return "", "", fmt.Sprintf("the configuration never puts %s's pods in namespace %s", describe(user, server), pod.Namespace)
	}
	return user, server, why
}

// identityOf reads the hub user and server a pod is for. A pod with the
// key label must match it; one without (made before the label) is read
// from its annotations alone.
func identityOf(pod *metav1.ObjectMeta) (user, server, why string) {
	if _, labelled := pod.Labels[serverid.LabelKey]; labelled {
		u, s, ok := serverid.OfMeta(pod)
		if !ok {
			return "", "", "its server-key label does not match its user and server annotations"
		}
		return u, s, ""
	}
	user, ok := pod.Annotations[poll.AnnotationUser]
	if !ok || user == "" {
		return "", "", "it names no hub user"
	}
	return user, pod.Annotations[poll.AnnotationServerName], ""
}

func describe(user, server string) string {
	if server == "" {
		return user + "'s default server"
	}
	return user + "'s server " + server
}

// owns reports whether pod is the server key's pod: its identity names
// that server and it is where the configuration (or the hub's saved state)
// puts it.
func (m *Manager) owns(pod *corev1.Pod, key Key, hint Hint) (bool, string) {
	user, server, why := identityOf(&pod.ObjectMeta)
	switch {
	case why != "":
		return false, why
	case user != key.User || server != key.Server:
		return false, "it belongs to " + describe(user, server)
	case pod.Namespace == hint.Namespace && hint.Namespace != "":
		return true, ""
	case !m.cfg.MayHold(user, server, 0, pod.Namespace):
		return false, fmt.Sprintf("the configuration never puts %s's pods in namespace %s", describe(user, server), pod.Namespace)
	}
	return true, ""
}

// find locates a server's pod from the cluster alone, so every replica, a
// restarted one included, finds the same pod whatever profile, name
// template or slug scheme placed it: first by the key label, then at the
// hub's saved pod name, then where the base settings would put it. ref is
// where the server's pod is or would be; pod is nil unless one is there
// and owned.
func (m *Manager) find(key Key, hint Hint) (podRef, *corev1.Pod) {
	ref, pod, _ := m.locate(key, hint)
	return ref, pod
}

// locate is find, and also says whether the pod is the only one labelled
// with the server's key and is the server's whatever the hint: then every
// poll of the server, with any hint, finds that pod.
func (m *Manager) locate(key Key, hint Hint) (podRef, *corev1.Pod, bool) {
	var best *corev1.Pod
	labelled := m.watcher.PodsOf(serverid.Key(key.User, key.Server))
	for _, p := range labelled {
		if !m.ownsLabelled(p, key, hint) {
			continue
		}
		switch {
		case best == nil, hint.UID != "" && p.UID == hint.UID:
			best = p
		case best.UID == hint.UID && hint.UID != "":
		case best.DeletionTimestamp != nil && p.DeletionTimestamp == nil:
			best = p // the live pod over one on its way out
		case (best.DeletionTimestamp == nil) == (p.DeletionTimestamp == nil):
			best = p // the newer one (PodsOf is oldest first)
		}
	}
	if best != nil {
		sole := len(labelled) == 1 && m.cfg.MayHold(key.User, key.Server, 0, best.Namespace)
		return podRef{best.Namespace, best.Name}, best, sole
	}
	refs := make([]podRef, 0, 2)
	if hint.Pod != "" && hint.Namespace != "" {
		refs = append(refs, podRef{hint.Namespace, hint.Pod})
	}
	if ns, name, err := spawner.DefaultPod(m.cfg, key.User, key.Server); err == nil {
		refs = append(refs, podRef{ns, name})
	}
	for _, ref := range refs {
		st := m.watcher.Status(ref.namespace, ref.name)
		if st.Pod == nil {
			continue
		}
		if ok, why := m.owns(st.Pod, key, hint); !ok {
			m.log.Debug("locate: the pod at the server's name is not its own", zap.String("user", key.User), zap.String("server", key.Server),
				zap.String("pod", ref.name), zap.String("namespace", ref.namespace), zap.String("why", why))
			continue
		}
		return ref, st.Pod, false
	}
	if len(refs) == 0 {
		return podRef{}, nil, false
	}
	return refs[len(refs)-1], nil, false
}

// ownsLabelled is owns for a pod found under the server's key label: with
// the label known to be the key of key's user and server, the pod's
// identity is whole and key's exactly when its annotations name them, so
// the key need not be hashed again.
func (m *Manager) ownsLabelled(pod *corev1.Pod, key Key, hint Hint) bool {
	user, ok := pod.Annotations[serverid.AnnotationUser]
	if !ok || user != key.User || pod.Annotations[serverid.AnnotationServer] != key.Server {
		return false
	}
	return hint.Namespace != "" && pod.Namespace == hint.Namespace || m.cfg.MayHold(key.User, key.Server, 0, pod.Namespace)
}

// settingsCache resolves a pod's user_options (serverid.AnnotationUserOptions)
// once per distinct value: the settings of a spawn another replica started.
type settingsCache struct {
	mu sync.Mutex
	m  map[string]*spawner.Settings
}

// maxCachedSettings bounds the cache; free-text options could grow it.
const maxCachedSettings = 1024

func (m *Manager) settingsOf(pod *corev1.Pod) *spawner.Settings {
	if pod == nil {
		return m.base
	}
	raw, ok := pod.Annotations[serverid.AnnotationUserOptions]
	if !ok || raw == "" || raw == "{}" {
		return m.base
	}
	c := &m.settings
	c.mu.Lock()
	s, hit := c.m[raw]
	c.mu.Unlock()
	if hit {
		return s
	}
	var opts map[string]any
	if err := json.Unmarshal([]byte(raw), &opts); err != nil {
		return m.base
	}
	s, err := m.cfg.Resolve(opts)
	if err != nil {
		// The configuration changed since: the base is the best guess.
		s = m.base
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedSettings {
		c.m = map[string]*spawner.Settings{}
	}
	c.m[raw] = s
	c.mu.Unlock()
	return s
}
