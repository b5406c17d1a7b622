package poll

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// evictedMessage is the eviction message of seed 003 (mybinder.org).
const evictedMessage = "The node was low on resource: memory. Container notebook was using 1900004Ki, which exceeds its request of 471859200."

func TestStatusStoppedRule(t *testing.T) {
	finished := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		pod          *corev1.Pod
		delete       bool
		wantState    State
		wantExitCode int
		wantStop     *StopInfo // At is checked separately when zero here
	}{
		"evicted as in seed 003, container still reads running": {
			pod:          newPod("evicted").running(true).phase(corev1.PodFailed).reason("Evicted", evictedMessage).obj(),
			wantState:    StateStopped,
			wantExitCode: 1,
			wantStop:     &StopInfo{Phase: "Failed", Reason: "Evicted", Message: evictedMessage, ExitCode: 1},
		},
		"notebook OOMKilled 137 while phase is Running": {
			pod:          newPod("oom").running(false).terminated(137, "OOMKilled", finished).obj(),
			wantState:    StateStopped,
			wantExitCode: 137,
			wantStop:     &StopInfo{Phase: "Running", ContainerReason: "OOMKilled", ExitCode: 137, At: finished, Terminated: true},
		},
		"succeeded, notebook completed with 0": {
			pod:          newPod("done").phase(corev1.PodSucceeded).terminated(0, "Completed", finished).obj(),
			wantState:    StateStopped,
			wantExitCode: 0,
			wantStop:     &StopInfo{Phase: "Succeeded", ContainerReason: "Completed", ExitCode: 0, At: finished, Terminated: true},
		},
		"failed without container statuses (OutOfcpu)": {
			pod:          newPod("outofcpu").phase(corev1.PodFailed).reason("OutOfcpu", "Pod Node didn't have enough resource: cpu").obj(),
			wantState:    StateStopped,
			wantExitCode: 1,
			wantStop:     &StopInfo{Phase: "Failed", Reason: "OutOfcpu", Message: "Pod Node didn't have enough resource: cpu", ExitCode: 1},
		},
		"pending": {
			pod:       newPod("pending").obj(),
			wantState: StatePending,
		},
		"running but not ready": {
			pod:       newPod("notready").running(false).obj(),
			wantState: StatePending,
		},
		"running and ready": {
			pod:       newPod("ready").running(true).obj(),
			wantState: StateRunning,
		},
		"running and ready but being deleted is still pending (stopping)": {
			pod:       newPod("stopping").running(true).deleting().obj(),
			wantState: StatePending,
		},
		"deleted": {
			pod:          newPod("deleted").running(true).obj(),
			delete:       true,
			wantState:    StateAbsent,
			wantExitCode: 1,
			wantStop:     &StopInfo{Phase: "Running", Reason: ReasonDeleted, ExitCode: 1, PodDeleted: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(tc.pod)
			// No deletion, no notifier: this is about what Status reads.
			w := startWatcher(t, client, Options{})
			if tc.delete {
				if err := client.CoreV1().Pods(testNS).Delete(context.Background(), tc.pod.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "stop recorded", func() bool { _, ok := w.LastStop(testNS, tc.pod.Name); return ok })
			}
			got := w.Status(testNS, tc.pod.Name)
			if got.State != tc.wantState {
				t.Fatalf("State = %q, want %q", got.State, tc.wantState)
			}
			if got.State.Stopped() != (tc.wantStop != nil) {
				t.Errorf("Stopped() = %v", got.State.Stopped())
			}
			if tc.wantStop == nil {
				if got.Stop != nil {
					t.Errorf("Stop = %+v, want nil", got.Stop)
				}
				if got.Pod == nil || got.Pod.Name != tc.pod.Name {
					t.Errorf("Pod = %v, want the cached pod", got.Pod)
				}
				return
			}
			if got.ExitCode != tc.wantExitCode {
				t.Errorf("ExitCode = %d, want %d", got.ExitCode, tc.wantExitCode)
			}
			if got.Stop == nil {
				t.Fatalf("Stop = nil, want %+v", tc.wantStop)
			}
			gotStop := *got.Stop
			if gotStop.At.IsZero() {
				t.Errorf("Stop.At is zero")
			}
			if tc.wantStop.At.IsZero() {
				gotStop.At = time.Time{}
			}
			if !reflect.DeepEqual(gotStop, *tc.wantStop) {
				t.Errorf("Stop = %+v\nwant   %+v", gotStop, *tc.wantStop)
			}
		})
	}
}

func TestStatusBeforeSyncIsPending(t *testing.T) {
	w, err := New(fake.NewClientset(), Options{Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Status(testNS, "jupyter-alice"); got.State != StatePending {
		t.Errorf("State before sync = %q, want %q (never absent before the first LIST)", got.State, StatePending)
	}
	if w.HasSynced() {
		t.Error("HasSynced() = true before Run")
	}
}

func TestStatusAbsentWithoutHistory(t *testing.T) {
	w := startWatcher(t, fake.NewClientset(), Options{})
	got := w.Status(testNS, "jupyter-nobody")
	if got.State != StateAbsent || got.ExitCode != 1 || got.Stop != nil || got.Pod != nil {
		t.Errorf("Status = %+v, want absent with exit code 1 and no stop info", got)
	}
}

func TestServerRefOf(t *testing.T) {
	cases := map[string]struct {
		labels, annotations map[string]string
		want                ServerRef
	}{
		"own annotations win": {
			labels:      map[string]string{LabelHubServer: "slug"},
			annotations: map[string]string{AnnotationUser: "Alice@x", AnnotationServerName: "My Server", AnnotationHubUsername: "other"},
			want:        ServerRef{User: "Alice@x", Server: "My Server"},
		},
		"kubespawner annotations": {
			annotations: map[string]string{AnnotationHubUsername: "bob", AnnotationHubServer: "gpu"},
			want:        ServerRef{User: "bob", Server: "gpu"},
		},
		"kubespawner default server: servername label only": {
			labels:      map[string]string{LabelHubServer: ""},
			annotations: map[string]string{AnnotationHubUsername: "carol"},
			want:        ServerRef{User: "carol"},
		},
		"named server from the label": {
			labels:      map[string]string{LabelHubServer: "srv"},
			annotations: map[string]string{AnnotationHubUsername: "dan"},
			want:        ServerRef{User: "dan", Server: "srv"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: tc.labels, Annotations: tc.annotations}}
			want := tc.want
			want.Pod, want.Namespace = "p", "ns"
			if got := serverRefOf(pod); got != want {
				t.Errorf("serverRefOf = %+v, want %+v", got, want)
			}
		})
	}
}
