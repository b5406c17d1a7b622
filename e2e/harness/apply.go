package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// ApplyFile creates the objects in a YAML file of the repository (path
// relative to its root).
func (e *Env) ApplyFile(ctx context.Context, path string) error {
	data, err := os.ReadFile(filepath.Join(e.RepoDir, path))
	if err != nil {
		return err
	}
	return e.ApplyYAML(ctx, data)
}

// ApplyYAML creates the objects of a multi-document YAML text, those of
// the given kinds only when kinds are named; an object that exists already
// is kept.
func (e *Env) ApplyYAML(ctx context.Context, data []byte, kinds ...string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("decoding YAML: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		if len(kinds) > 0 && !slices.Contains(kinds, gvk.Kind) {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
		_, err = dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", gvk.Kind, u.GetName(), err)
		}
	}
	return nil
}

// InstallReservationCRD applies the GPUReservation CRD from the chart and
// waits until the API server serves it.
func (e *Env) InstallReservationCRD(ctx context.Context) error {
	if err := e.ApplyFile(ctx, "deploy/helm/spawnerd/crds/gpureservations.yaml"); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(gvr).Get(ctx, "gpureservations.reservations.dsmlp.io", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}
