package poll

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/serverid"
)

func keyedPod(ns, name, key, rv string) *cachedPod {
	return &cachedPod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv,
		UID: types.UID(ns + "/" + name + "@" + rv), Labels: map[string]string{serverid.LabelKey: key}}}
}

func TestServerKeysFollowTheStore(t *testing.T) {
	s := newServerKeys()
	a1 := keyedPod("jhub", "jupyter-a", "ka", "1")
	s.set(nil, a1)
	if p, n := s.only("ka"); p != a1.version() || n != 1 {
		t.Fatalf("after add: only = %v, %d", p, n)
	}
	// An update replaces the object: no pointer to the old one is kept.
	a2 := keyedPod("jhub", "jupyter-a", "ka", "2")
	s.set(a1, a2)
	if p, n := s.only("ka"); p != a2.version() || n != 1 {
		t.Fatalf("after update: only = %v, %d", p, n)
	}
	// A second pod of the same server (a profile moved it): both, no only.
	b := keyedPod("other", "jupyter-a-gpu", "ka", "3")
	s.set(nil, b)
	if p, n := s.only("ka"); p != (PodVersion{}) || n != 2 {
		t.Errorf("two pods: only = %v, %d", p, n)
	}
	if got := s.of("ka"); len(got) != 2 {
		t.Errorf("of = %d pods, want 2", len(got))
	}
	// A changed label moves the pod.
	a3 := keyedPod("jhub", "jupyter-a", "kb", "4")
	s.set(a2, a3)
	if p, n := s.only("ka"); p != b.version() || n != 1 {
		t.Errorf("after the label moved: ka = %v, %d", p, n)
	}
	if p, n := s.only("kb"); p != a3.version() || n != 1 {
		t.Errorf("after the label moved: kb = %v, %d", p, n)
	}
	// Deletes by namespace and name, with the last state seen.
	s.remove(keyedPod("jhub", "jupyter-a", "kb", "5"))
	s.remove(b)
	if len(s.m) != 0 {
		t.Errorf("after deletes the map holds %v", s.m)
	}
	// Unlabelled pods are not filed.
	s.set(nil, &cachedPod{ObjectMeta: metav1.ObjectMeta{Namespace: "jhub", Name: "x"}})
	if len(s.m) != 0 {
		t.Errorf("an unlabelled pod was filed: %v", s.m)
	}
}
