package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/dsmlp/spawner/reservation"
)

func webhook() *Webhook {
	return New(reservation.Config{Classes: []reservation.GPUClass{{Label: "a30", NodeSelector: map[string]string{"gpu-class": "a30", "gpu-model": "A30"}}}}, nil)
}

// review sends obj through the handler and returns it patched.
func review[T any](t *testing.T, kind string, obj *T) *T {
	t.Helper()
	return reviewOp(t, admissionv1.Create, kind, obj)
}

// reviewOp is review for another operation than CREATE.
func reviewOp[T any](t *testing.T, operation admissionv1.Operation, kind string, obj *T) *T {
	t.Helper()
	raw, _ := json.Marshal(obj)
	body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Kind: kind}, Operation: operation, Object: runtime.RawExtension{Raw: raw}}})
	rec := httptest.NewRecorder()
	webhook().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("bad response %d: %s", rec.Code, rec.Body)
	}
	if !out.Response.Allowed || out.Response.UID != "u1" {
		t.Fatalf("response %+v", out.Response)
	}
	if len(out.Response.Patch) == 0 {
		return obj
	}
	p, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patched, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", out.Response.Patch, err)
	}
	var res T
	if err := json.Unmarshal(patched, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

func TestPodGetsClassSelectionAndPodinfo(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"gpu-class": "a30"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"gpu-model": "mine"}, InitContainers: []corev1.Container{{Name: "init"}},
			Containers: []corev1.Container{{Name: "a"}, {Name: "b", VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: "/x"}}}}}}
	got := review(t, "Pod", pod)
	if got.Spec.NodeSelector["gpu-class"] != "a30" || got.Spec.NodeSelector["gpu-model"] != "mine" {
		t.Errorf("node selector %v: want the class's added and the pod's own kept", got.Spec.NodeSelector)
	}
	if len(got.Spec.Volumes) != 1 || got.Spec.Volumes[0].DownwardAPI == nil {
		t.Fatalf("volumes %+v", got.Spec.Volumes)
	}
	items := got.Spec.Volumes[0].DownwardAPI.Items
	if items[0].Path != "annotations" || items[0].FieldRef.FieldPath != "metadata.annotations" {
		t.Errorf("first item %+v", items[0])
	}
	found := false
	for _, it := range items {
		found = found || (it.Path == "guaranteed-until" && it.FieldRef.FieldPath == "metadata.annotations['galends/guaranteed-until']")
	}
	if !found {
		t.Error("no single-key file for guaranteed-until")
	}
	for _, c := range append(got.Spec.InitContainers, got.Spec.Containers...) {
		n := 0
		for _, m := range c.VolumeMounts {
			if m.MountPath == Mount && m.ReadOnly {
				n++
			}
		}
		if n != 1 {
			t.Errorf("container %s mounts: %+v", c.Name, c.VolumeMounts)
		}
	}
	// Idempotent: a pod made from a mutated template is left alone.
	if again := review(t, "Pod", got); len(again.Spec.Volumes) != 1 || len(again.Spec.Containers[0].VolumeMounts) != 1 {
		t.Errorf("second pass changed the pod: %+v", again.Spec)
	}
}

// A pod without a GPU class is not the engine's: no volume, no selector.
func TestCPUPodUntouched(t *testing.T) {
	got := review(t, "Pod", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}})
	if got.Spec.NodeSelector != nil || len(got.Spec.Volumes) != 0 || len(got.Spec.Containers[0].VolumeMounts) != 0 {
		t.Errorf("CPU pod mutated: %+v", got.Spec)
	}
	job := &batchv1.Job{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}}}
	if got := review(t, "Job", job); len(got.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("CPU job template mutated: %+v", got.Spec.Template.Spec)
	}
}

// An UPDATE is never mutated: a Job's template is immutable, and a changed
// Deployment template would roll it out.
func TestUpdateNeverMutated(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"gpu-class": "a30"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}
	job := &batchv1.Job{Spec: batchv1.JobSpec{Template: tmpl}}
	if got := reviewOp(t, admissionv1.Update, "Job", job); len(got.Spec.Template.Spec.Volumes) != 0 || got.Spec.Template.Spec.NodeSelector != nil {
		t.Errorf("job template mutated on UPDATE: %+v", got.Spec.Template.Spec)
	}
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	if got := reviewOp(t, admissionv1.Update, "Pod", pod); len(got.Spec.Volumes) != 0 || got.Spec.NodeSelector != nil {
		t.Errorf("pod mutated on UPDATE: %+v", got.Spec)
	}
}

func TestDeploymentTemplate(t *testing.T) {
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"gpu-class": "a30"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}}}
	got := review(t, "Deployment", d)
	if got.Spec.Template.Spec.NodeSelector["gpu-class"] != "a30" || len(got.Spec.Template.Spec.Volumes) != 1 {
		t.Errorf("template %+v", got.Spec.Template.Spec)
	}
}

func TestBadRequests(t *testing.T) {
	rec := httptest.NewRecorder()
	webhook().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader([]byte("{"))))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("malformed review: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	webhook().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/mutate", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", rec.Code)
	}
}
