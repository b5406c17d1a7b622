// Package admission is the mutating admission webhook spawnerd serves for
// GPU pods: it adds the node selection of a pod's GPU class (to pods, and to
// the pod templates of Jobs, CronJobs, Deployments, StatefulSets,
// ReplicaSets and DaemonSets) and mounts the downward-API volume that shows
// the reservation annotations at /etc/podinfo in every container.
//
// Only objects with a gpu-class label are touched, and only when they are
// created: a pod template can be immutable (a Job's), and a changed
// Deployment template would roll the Deployment out. Every pod is mutated
// when it is created anyway, so a template never mutated loses nothing.
package admission

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"

	"github.com/dsmlp/spawner/reservation"
)

// Mount is where the podinfo volume is mounted.
const (
	Mount      = "/etc/podinfo"
	VolumeName = "podinfo"
)

// maxBody bounds an AdmissionReview (the API server sends at most ~3 MiB objects).
const maxBody = 8 << 20

// Webhook mutates pods and pod templates.
type Webhook struct {
	classes map[string]map[string]string // class → node selector
	prefix  string
	log     *zap.Logger
}

// New builds the webhook from the reservation configuration.
func New(cfg reservation.Config, log *zap.Logger) *Webhook {
	cfg = cfg.WithDefaults()
	w := &Webhook{classes: map[string]map[string]string{}, prefix: cfg.AnnotationPrefix, log: log}
	for _, c := range cfg.Classes {
		w.classes[c.Label] = c.NodeSelector
	}
	if w.log == nil {
		w.log = zap.NewNop()
	}
	return w
}

// ServeHTTP answers one AdmissionReview.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(rw, `{"error":"POST an AdmissionReview"}`, http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(rw, `{"error":"reading body"}`, http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(rw, `{"error":"body is not an AdmissionReview with a request"}`, http.StatusBadRequest)
		return
	}
	resp := w.Review(review.Request)
	review.Response = resp
	review.Request = nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(&review)
}

// Review decides one admission request. It never refuses: a request it
// cannot read is allowed unchanged (the class taint still holds the pod).
func (w *Webhook) Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	ops, err := w.patch(req)
	log := w.log.With(zap.String("kind", req.Kind.Kind), zap.String("namespace", req.Namespace), zap.String("name", req.Name))
	if err != nil {
		log.Warn("admission: object not understood; allowed unchanged", zap.Error(err))
		return resp
	}
	if len(ops) == 0 {
		return resp
	}
	b, err := json.Marshal(ops)
	if err != nil {
		log.Warn("admission: encoding patch failed", zap.Error(err))
		return resp
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = b, &pt
	log.Debug("admission: mutated", zap.Int("ops", len(ops)))
	return resp
}

// op is one JSON patch operation.
type op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// templatePaths is where each workload kind keeps its pod template.
var templatePaths = map[string]string{
	"Deployment": "/spec/template", "StatefulSet": "/spec/template", "ReplicaSet": "/spec/template",
	"DaemonSet": "/spec/template", "Job": "/spec/template", "CronJob": "/spec/jobTemplate/spec/template",
}

func (w *Webhook) patch(req *admissionv1.AdmissionRequest) ([]op, error) {
	// The chart registers CREATE only; an UPDATE sent by an older
	// configuration is still left alone (spec.template of a Job is immutable).
	if req.Operation != admissionv1.Create {
		return nil, nil
	}
	if req.Kind.Kind == "Pod" && req.SubResource == "" {
		var pod corev1.Pod
		// Case-sensitive, as the API server decodes: a key it would ignore
		// ("metAdAtA") must not be read as the one it stands for.
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &pod); err != nil {
			return nil, fmt.Errorf("decoding pod: %w", err)
		}
		return w.podOps("", pod.ObjectMeta, &pod.Spec), nil
	}
	base, ok := templatePaths[req.Kind.Kind]
	if !ok || req.SubResource != "" {
		return nil, nil
	}
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", req.Kind.Kind, err)
	}
	raw := dig(obj, strings.Split(strings.TrimPrefix(base, "/"), "/"))
	if raw == nil {
		return nil, nil
	}
	b, _ := json.Marshal(raw)
	var tmpl corev1.PodTemplateSpec
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, &tmpl); err != nil {
		return nil, fmt.Errorf("decoding the pod template of %s: %w", req.Kind.Kind, err)
	}
	return w.podOps(base, tmpl.ObjectMeta, &tmpl.Spec), nil
}

func dig(m map[string]any, path []string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

// podOps mutates one pod spec found at base (a pod itself: base ""); a pod
// without a GPU class is not the engine's and is left as it is.
func (w *Webhook) podOps(base string, meta metav1.ObjectMeta, spec *corev1.PodSpec) []op {
	class := meta.Labels[reservation.ClassLabel]
	if class == "" {
		return nil
	}
	var ops []op
	if sel := w.classes[class]; len(sel) > 0 {
		if spec.NodeSelector == nil {
			ops = append(ops, op{Op: "add", Path: base + "/spec/nodeSelector", Value: sel})
		} else {
			for _, k := range slices.Sorted(maps.Keys(sel)) {
				// A key the pod sets itself is its own choice; a wrong one
				// shows up as NoMatchingNode.
				if _, set := spec.NodeSelector[k]; !set {
					ops = append(ops, op{Op: "add", Path: base + "/spec/nodeSelector/" + escape(k), Value: sel[k]})
				}
			}
		}
	}
	return append(ops, w.podinfoOps(base, spec)...)
}

// podinfoOps adds the downward-API volume and its mount, unless the pod
// already has a volume of that name or a mount at /etc/podinfo.
func (w *Webhook) podinfoOps(base string, spec *corev1.PodSpec) []op {
	for _, v := range spec.Volumes {
		if v.Name == VolumeName {
			return nil
		}
	}
	var ops []op
	vol := w.volume()
	if spec.Volumes == nil {
		ops = append(ops, op{Op: "add", Path: base + "/spec/volumes", Value: []corev1.Volume{vol}})
	} else {
		ops = append(ops, op{Op: "add", Path: base + "/spec/volumes/-", Value: vol})
	}
	mount := corev1.VolumeMount{Name: VolumeName, MountPath: Mount, ReadOnly: true}
	add := func(field string, cs []corev1.Container) {
		for i, c := range cs {
			if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == Mount }) {
				continue
			}
			p := fmt.Sprintf("%s/spec/%s/%d/volumeMounts", base, field, i)
			if c.VolumeMounts == nil {
				ops = append(ops, op{Op: "add", Path: p, Value: []corev1.VolumeMount{mount}})
			} else {
				ops = append(ops, op{Op: "add", Path: p + "/-", Value: mount})
			}
		}
	}
	add("initContainers", spec.InitContainers)
	add("containers", spec.Containers)
	return ops
}

// volume projects all annotations into "annotations" and each reservation
// annotation into a file of its own (an absent key reads as an empty file).
func (w *Webhook) volume() corev1.Volume {
	items := []corev1.DownwardAPIVolumeFile{
		{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
		{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
	}
	for _, k := range reservation.WrittenAnnotations() {
		items = append(items, corev1.DownwardAPIVolumeFile{Path: k,
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.annotations['%s%s']", w.prefix, k)}})
	}
	return corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: items}}}
}

// escape is JSON pointer escaping (RFC 6901).
func escape(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }
