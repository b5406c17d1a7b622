// Package serverid names a hub server's objects in the cluster: the labels,
// annotations and finalizer that let any spawnerd replica find a server's
// pod, tell who owns it and record what was done to it, with nothing kept
// in memory.
package serverid

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// LabelKey is the server's stable key (see Key): the pod informer is
	// indexed by it, so a server's pod is found whatever its name or
	// namespace became through profiles, templates or slug schemes.
	LabelKey = "spawner.dsmlp.io/server-key"
	// AnnotationUser holds the raw hub user name.
	AnnotationUser = "spawner.dsmlp.io/user"
	// AnnotationServer holds the raw hub server name ("" for the default
	// server).
	AnnotationServer = "spawner.dsmlp.io/server-name"
	// AnnotationUserOptions holds the spawn's user_options as JSON, so any
	// replica can resolve the spawn's settings again (URL, progress).
	AnnotationUserOptions = "spawner.dsmlp.io/user-options"
	// AnnotationStartDeadline is when the spawn must be ready (RFC 3339):
	// start_timeout written on the pod, so the replica that leads enforces
	// it after the starter is gone.
	AnnotationStartDeadline = "spawner.dsmlp.io/start-deadline"
	// AnnotationStopRequested says who asked for the pod to go (the hub,
	// a timed-out spawn): such a stop is not reported back to the hub.
	AnnotationStopRequested = "spawner.dsmlp.io/stop-requested"
	// AnnotationProfile is the slug of the profile the spawn chose.
	AnnotationProfile = "spawner.dsmlp.io/profile"
	// AnnotationRequestedBy says who asked the hub for the spawn and when,
	// as JSON {"kind", "name", "at"}: the session history's "requested".
	AnnotationRequestedBy = "spawner.dsmlp.io/requested-by"
	// FinalizerStopReport keeps a stopped or deleted pod in the API until
	// the hub has been told about it, so a stop seen by a replica that dies
	// before telling the hub is still there for the next leader.
	FinalizerStopReport = "spawner.dsmlp.io/stop-report"
)

// Stop requesters written into AnnotationStopRequested. A stop asked for
// through the hub by someone it knows is written "<kind>:<name>" (see
// StopBy), e.g. "admin:bob" or "culler:idle-culler".
const (
	StopByHub     = "hub"
	StopByTimeout = "start-timeout"
)

// StopBy is the AnnotationStopRequested value for a stop asked for by a
// requester of that kind and name ("" name: the kind alone).
func StopBy(kind, name string) string {
	if name == "" {
		return kind
	}
	return kind + ":" + name
}

// StopRequester splits an AnnotationStopRequested value into the
// requester's kind and name; ok is false when the pod has none.
func StopRequester(pod *corev1.Pod) (kind, name string, ok bool) {
	v, ok := pod.Annotations[AnnotationStopRequested]
	if !ok {
		return "", "", false
	}
	kind, name, _ = strings.Cut(v, ":")
	return kind, name, true
}

// Key is the label-safe stable key of a hub server: 40 hex digits of the
// SHA-256 of the raw user and server names.
func Key(user, server string) string {
	sum := sha256.Sum256([]byte(user + "\x00" + server))
	return hex.EncodeToString(sum[:20])
}

// Of returns the hub user and server a pod is labelled and annotated for;
// ok is false unless its key label matches its annotations, so a pod whose
// annotations were edited after it was made is not taken for anyone's.
func Of(pod *corev1.Pod) (user, server string, ok bool) {
	return OfMeta(&pod.ObjectMeta)
}

// OfMeta is Of for a pod's metadata.
func OfMeta(meta *metav1.ObjectMeta) (user, server string, ok bool) {
	user, hasUser := meta.Annotations[AnnotationUser]
	server = meta.Annotations[AnnotationServer]
	if !hasUser || meta.Labels[LabelKey] != Key(user, server) {
		return "", "", false
	}
	return user, server, true
}

// StartDeadline returns the pod's start deadline, if it has one.
func StartDeadline(pod *corev1.Pod) (time.Time, bool) {
	v, ok := pod.Annotations[AnnotationStartDeadline]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// HasFinalizer reports whether the pod carries FinalizerStopReport.
func HasFinalizer(pod *corev1.Pod) bool {
	for _, f := range pod.Finalizers {
		if f == FinalizerStopReport {
			return true
		}
	}
	return false
}

// requestedBy is AnnotationRequestedBy's value.
type requestedBy struct {
	Kind string    `json:"kind"`
	Name string    `json:"name,omitempty"`
	At   time.Time `json:"at"`
}

// RequestedBy is the AnnotationRequestedBy value for a spawn asked for by a
// requester of that kind and name at that time.
func RequestedBy(kind, name string, at time.Time) string {
	raw, _ := json.Marshal(requestedBy{Kind: kind, Name: name, At: at.UTC()}) // cannot fail: strings and a time
	return string(raw)
}

// Requester reads AnnotationRequestedBy; ok is false when the pod has no
// readable one.
func Requester(pod *corev1.Pod) (kind, name string, at time.Time, ok bool) {
	raw, ok := pod.Annotations[AnnotationRequestedBy]
	if !ok {
		return "", "", time.Time{}, false
	}
	var v requestedBy
	if err := json.Unmarshal([]byte(raw), &v); err != nil || v.At.IsZero() || v.Kind == "" {
		return "", "", time.Time{}, false
	}
	return v.Kind, v.Name, v.At, true
}
