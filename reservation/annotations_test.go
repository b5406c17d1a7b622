package reservation

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/annotations/*.golden from the current output")

// Golden cases: the annotations of pod alice/p after the scenario, then a
// no-op reconcile five minutes later must write nothing.
func TestAnnotationsGolden(t *testing.T) {
	tests := map[string]func(t *testing.T, e *Engine) *world{
		"booking": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0.Add(5*time.Minute), mediumNodes()...)
			w.addRes(booking(41, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
			w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
			w.decide(e)
			return w
		},
		"booking-chain": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0.Add(5*time.Minute), mediumNodes()...)
			w.addRes(
				booking(41, "alice", course, "medium", 1, t0, t0.Add(3*time.Hour)),
				booking(42, "alice", course, "medium", 1, t0.Add(3*time.Hour), t0.Add(8*time.Hour)))
			w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
			w.decide(e)
			return w
		},
		"chain-moved": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0.Add(5*time.Minute), mediumNodes()...)
			w.addRes(
				booking(41, "alice", course, "medium", 1, t0, t0.Add(3*time.Hour)),
				booking(42, "alice", course, "medium", 1, t0.Add(3*time.Hour), t0.Add(8*time.Hour)))
			w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
			w.decide(e)
			w.step(3 * time.Hour)
			w.decide(e)
			return w
		},
		"lease": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0, mediumNodes()...)
			w.addPod(newPod("alice", "p").class("medium").gpus(2).ann(AnnMinimumRuntime, "7200").obj())
			w.decide(e)
			return w
		},
		"overstay": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0, mediumNodes()...)
			w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
			w.decide(e)
			w.step(75 * time.Minute)
			w.decide(e)
			return w
		},
		"warning": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0, newNode("gpu-m1", "medium", 2))
			w.addPod(newPod("alice", "p").class("medium").gpus(2).course(course).obj())
			w.decide(e)
			w.step(80 * time.Minute) // 10:20 PDT, guarantee ended 10:10
			w.addRes(booking(60, "bob", course, "medium", 1, t0.Add(110*time.Minute), t0.Add(4*time.Hour)))
			w.decide(e)
			return w
		},
		"relinked": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0.Add(-40*time.Minute), mediumNodes()...)
			w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).obj())
			w.decide(e)
			w.addRes(booking(46, "alice", course, "medium", 1, t0, t0.Add(8*time.Hour)))
			w.step(40 * time.Minute)
			w.decide(e)
			return w
		},
		"best-effort": func(t *testing.T, e *Engine) *world {
			w := newWorld(t, t0, mediumNodes()...)
			w.addPod(newPod("alice", "p").class("medium").gpus(1).course(course).ann(AnnRuntimeGuarantee, "none").obj())
			w.decide(e)
			return w
		},
	}
	for name, scenario := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) { c.BestEffort = name == "best-effort" })
			w := scenario(t, e)
			p := w.pod("alice", "p")
			if p == nil {
				t.Fatal("pod alice/p is gone")
			}
			got := renderAnnotations(p.Annotations)
			golden := filepath.Join("testdata", "annotations", name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./reservation -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("annotations differ from %s\n--- want\n%s--- got\n%s", golden, want, got)
			}

			w.step(5 * time.Minute)
			plan := e.Decide(w.snapshot())
			for _, pp := range append(plan.Admissions, plan.Updates...) {
				if pp.Pod.Name == "p" {
					t.Errorf("no-op reconcile wrote %v", pp.Annotations)
				}
			}
		})
	}
}

func TestAnnotationsDiff(t *testing.T) {
	k := newAnnotationKeys(prefix)
	until := t0.Add(time.Hour)
	r := booking(41, "alice", course, "medium", 1, t0, until)
	st := admittedState{res: &r, className: "Medium", now: t0, until: until, resolved: true, stamp: true}
	base := k.desired(nil, st)
	current := map[string]string{"other": "kept", k.minRuntime: "3600"}
	for key, v := range base {
		current[key] = v
	}

	if d := k.diff(current, k.desired(current, st)); d != nil {
		t.Errorf("unchanged pod: diff %v, want none", d)
	}

	st.warning = &warning{at: t0.Add(45 * time.Minute), risk: 0.5, message: "m"}
	withWarning := k.desired(current, st)
	d := k.diff(current, withWarning)
	if len(d) != 3 || *d[k.warnRisk] != "0.50" || *d[k.warnAt] != "2026-09-23T16:45:00Z" {
		t.Errorf("warning diff = %v", d)
	}
	for key, v := range withWarning {
		current[key] = v
	}
	st.warning = nil
	d = k.diff(current, k.desired(current, st))
	want := map[string]*string{k.warnAt: nil, k.warnRisk: nil, k.warnMsg: nil}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("cleared warning diff = %v, want the three keys removed", d)
	}
	if _, touched := d["other"]; touched {
		t.Error("diff touched a foreign annotation")
	}
	for key := range d {
		delete(current, key)
	}

	// Past the guarantee: status flips, guaranteed-until stays frozen even
	// when the computed guarantee moves.
	st.now = until.Add(time.Minute)
	st.until = until.Add(-time.Hour)
	st.stamp = false
	d = k.diff(current, k.desired(current, st))
	if len(d) != 1 || *d[k.status] != StatusOverstay {
		t.Errorf("overstay diff = %v, want only guarantee-status", d)
	}
}

func TestAdmissionMergePatch(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.SchedulingGate = "dsmlp.ucsd.edu/gpu-reservation" })
	p := newPod("alice", "p").class("medium").gpus(1).course(course).obj()
	p.Spec.Tolerations = []corev1.Toleration{{Key: "user", Operator: corev1.TolerationOpExists}}
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "dsmlp.ucsd.edu/gpu-reservation"}, {Name: "other"}}
	p.Status.Conditions = nil // gated pods get no scheduler verdict
	w := newWorld(t, t0, mediumNodes()...)
	w.addRes(booking(41, "alice", course, "medium", 1, t0, t0.Add(time.Hour)))
	w.addPod(p)
	plan := e.Decide(w.snapshot())
	if len(plan.Admissions) != 1 {
		t.Fatalf("admissions = %d", len(plan.Admissions))
	}
	body, err := plan.Admissions[0].MergePatch()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			UID             string             `json:"uid"`
			ResourceVersion string             `json:"resourceVersion"`
			Annotations     map[string]*string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Tolerations     []corev1.Toleration        `json:"tolerations"`
			SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	wantTol := []corev1.Toleration{{Key: "user", Operator: corev1.TolerationOpExists},
		{Key: "gpu-class-reservation", Operator: corev1.TolerationOpEqual, Value: "medium", Effect: corev1.TaintEffectNoSchedule}}
	if !reflect.DeepEqual(got.Spec.Tolerations, wantTol) {
		t.Errorf("tolerations = %+v", got.Spec.Tolerations)
	}
	if !reflect.DeepEqual(got.Spec.SchedulingGates, []corev1.PodSchedulingGate{{Name: "other"}}) {
		t.Errorf("gates = %+v", got.Spec.SchedulingGates)
	}
	if got.Metadata.UID != "alice-p-uid" || got.Metadata.ResourceVersion != "1" {
		t.Errorf("preconditions uid=%q rv=%q", got.Metadata.UID, got.Metadata.ResourceVersion)
	}
	if v := got.Metadata.Annotations[prefix+AnnBookingReference]; v == nil || *v != "res-41" {
		t.Errorf("booking-reference = %v", v)
	}

	// An annotation-only update carries no resourceVersion: keys merge.
	upd := PodPatch{Pod: PodRef{UID: "u", ResourceVersion: "9"}, Annotations: map[string]*string{"k": nil}}
	body, _ = upd.MergePatch()
	if strings.Contains(string(body), "resourceVersion") || !strings.Contains(string(body), `"k":null`) {
		t.Errorf("update patch = %s", body)
	}
}
