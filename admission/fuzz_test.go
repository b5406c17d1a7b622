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
	kjson "sigs.k8s.io/json"
)

// FuzzServeHTTP feeds AdmissionReview bodies to the webhook: it never
// panics, answers 200 or 400, never refuses an object, and any patch it
// returns applies to the object it was sent.
//
// An object is sent as the API server sends it: decoded case-sensitively
// into its type and encoded again, so its keys are canonical and its specs
// are there. (The first runs found that a raw {"metAdAtA": {"lABels": ...}}
// without a spec, as a pod or a template, gets a patch that does not apply:
// the webhook's typed decoding is case-insensitive. The API server never
// sends such a body.)
func FuzzServeHTTP(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"kind":"Pod"},"operation":"CREATE","object":{"metadata":{"labels":{"gpu-class":"a30"}},"spec":{"containers":[{"name":"c"}]}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u2","kind":{"kind":"Job"},"operation":"CREATE","object":{"spec":{"template":{"metadata":{"labels":{"gpu-class":"a30"}},"spec":{"nodeSelector":{"gpu-model":"x"},"containers":[{"name":"c"},{"name":"d"}]}}}}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u3","kind":{"kind":"CronJob"},"operation":"UPDATE","object":{"spec":{"jobTemplate":{"spec":{"template":{"spec":{}}}}}}}}`,
		`{"request":{"uid":"u4","kind":{"kind":"Pod"},"operation":"CREATE","object":"not an object"}}`,
		`{"request":null}`, `{}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	w := webhook()
	f.Fuzz(func(t *testing.T, body []byte) {
		body, ok := canonicalObject(body)
		if !ok {
			return // no API server sends this object
		}
		rec := httptest.NewRecorder()
		w.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
		if rec.Code == http.StatusBadRequest {
			return
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			t.Fatalf("answered 200 to %q, which is no AdmissionReview with a request", body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("bad answer %q", rec.Body)
		}
		if !out.Response.Allowed || out.Response.UID != in.Request.UID {
			t.Fatalf("response %+v to request %s", out.Response, in.Request.UID)
		}
		if len(out.Response.Patch) == 0 {
			return
		}
		p, err := jsonpatch.DecodePatch(out.Response.Patch)
		if err != nil {
			t.Fatalf("patch %s: %v", out.Response.Patch, err)
		}
		if _, err := p.Apply(in.Request.Object.Raw); err != nil {
			t.Fatalf("patch %s does not apply to %s: %v", out.Response.Patch, in.Request.Object.Raw, err)
		}
	})
}

// apiTypes are the kinds the webhook mutates, as the API server decodes them.
var apiTypes = map[string]func() any{
	"Pod":        func() any { return &corev1.Pod{} },
	"Deployment": func() any { return &appsv1.Deployment{} }, "StatefulSet": func() any { return &appsv1.StatefulSet{} },
	"ReplicaSet": func() any { return &appsv1.ReplicaSet{} }, "DaemonSet": func() any { return &appsv1.DaemonSet{} },
	"Job": func() any { return &batchv1.Job{} }, "CronJob": func() any { return &batchv1.CronJob{} },
}

// canonicalObject re-encodes the object of a review as the API server
// would; ok is false for an object the API server could not have decoded.
func canonicalObject(body []byte) ([]byte, bool) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		return body, true
	}
	newObj, known := apiTypes[review.Request.Kind.Kind]
	if !known {
		return body, true
	}
	obj := newObj()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(review.Request.Object.Raw, obj); err != nil {
		return nil, false
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, false
	}
	review.Request.Object.Raw = raw
	out, err := json.Marshal(&review)
	return out, err == nil
}
