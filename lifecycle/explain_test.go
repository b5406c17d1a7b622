package lifecycle

import (
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/spawner"
)

var (
	testNow      = time.Date(2026, 12, 3, 16, 40, 0, 0, time.UTC)
	testDeadline = testNow.Add(60 * time.Second)
)

func testLoc(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// gpuSettings asks for what a DSMLP GPU profile asks for: 1 GPU, 2 CPU
// (limit 4) and 8 GiB of memory.
func gpuSettings() *spawner.Settings {
	return &spawner.Settings{
		GPUClass: "a5000", CPUGuarantee: ptr.To(2.0), CPULimit: ptr.To(4.0), MemLimit: 8 << 30,
		ExtraResourceLimits: spawner.ResourceMap{"nvidia.com/gpu": "1"},
	}
}

func kubeEvent(reason, typ, msg string) *corev1.Event {
	return &corev1.Event{Reason: reason, Type: typ, Message: msg}
}

// The messages are kube-scheduler's and the kubelet's as v1.37.2 writes
// them: FitError.Error (pkg/scheduler/framework/types.go) with the Filter
// reasons of noderesources/fit.go, tainttoleration, nodeaffinity,
// nodeunschedulable and volumebinding, and the PostFilter suffix of
// defaultpreemption; the kubelet's image_manager.go, kuberuntime and
// operationexecutor texts; kwok's and the local-runtime node's Started.
func TestHeadlineTranslatesKubernetesMessages(t *testing.T) {
	const wait = " The spawn waits until 08:41:00 PST."
	for name, tc := range map[string]struct {
		settings *spawner.Settings
		ev       *corev1.Event
		want     string
	}{
		"gpu short after admission": {gpuSettings(), kubeEvent("FailedScheduling", "Warning",
			"0/8 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint(s), 4 node(s) didn't match Pod's node affinity/selector. "+
				"preemption: 0/8 nodes are available: 2 No preemption victims found for incoming pod, 6 Preemption is not helpful for scheduling."),
			"No node has 1 free nvidia.com/gpu (needed: 1 GPU, 2 CPU, 8 GiB memory), so the server waits for one to free up." + wait},
		"memory short": {&spawner.Settings{MemGuarantee: 4 << 30}, kubeEvent("FailedScheduling", "Warning",
			"0/8 nodes are available: 3 Insufficient memory, 5 node(s) didn't match Pod's node affinity/selector. preemption: 0/8 nodes are available: 3 No preemption victims found for incoming pod, 5 Preemption is not helpful for scheduling."),
			"No node has 4 GiB of free memory (needed: 4 GiB memory), so the server waits for one to free up." + wait},
		"cpu and memory short": {&spawner.Settings{CPULimit: ptr.To(0.5), MemLimit: 512 << 20}, kubeEvent("FailedScheduling", "Warning",
			"0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."),
			"No node has 0.5 free CPU or 512 MiB of free memory (needed: 0.5 CPU, 512 MiB memory), so the server waits for one to free up." + wait},
		"too many pods": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/3 nodes are available: 3 Too many pods. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."),
			"No node has room for another pod, so the server waits for one to free up." + wait},
		"selector matches nothing": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/8 nodes are available: 1 node(s) had untolerated taint(s), 7 node(s) didn't match Pod's node affinity/selector. preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling."),
			"No node matches this server's node selection, so it cannot start until a matching node is available." + wait},
		"gpu taint before the engine speaks": {gpuSettings(), kubeEvent("FailedScheduling", "Warning",
			"0/8 nodes are available: 3 node(s) had untolerated taint(s), 5 node(s) didn't match Pod's node affinity/selector. preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling."),
			"The GPU nodes of class a5000 are held for the GPU reservation system, which has not admitted this server yet." + wait},
		"taints only": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/2 nodes are available: 2 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."),
			"Every node that could run this server is set aside for other work (untolerated taints), so it cannot start there." + wait},
		"cordoned": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/3 nodes are available: 3 node(s) were unschedulable. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
			"The nodes that could run this server are closed to new servers (cordoned), for example for maintenance." + wait},
		"pvc not found": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			`0/8 nodes are available: persistentvolumeclaim "claim-alice" not found. preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling.`),
			"The server's storage volume (PersistentVolumeClaim claim-alice) does not exist yet, so no node can take the server until it does." + wait},
		"pvc unbound": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/8 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling."),
			"The server's storage volume is not ready yet: its PersistentVolumeClaim is not bound to a disk, so no node can take the server until it is." + wait},
		"volume node affinity": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/3 nodes are available: 3 node(s) didn't match PersistentVolume's node affinity. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
			"No node can reach the storage volume this server needs." + wait},
		"unknown filter reason": {&spawner.Settings{}, kubeEvent("FailedScheduling", "Warning",
			"0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."),
			"No node can take this server yet: node(s) didn't have free ports for the requested pod ports." + wait},
		"scheduled": {&spawner.Settings{}, kubeEvent("Scheduled", "Normal", "Successfully assigned ns1/jupyter-alice to cpu-0"),
			"Found a node for the server (cpu-0); starting it."},
		"pulling": {&spawner.Settings{}, kubeEvent("Pulling", "Normal", `Pulling image "quay.io/jupyter/scipy-notebook:2026-11-30"`),
			"Downloading the server's image quay.io/jupyter/scipy-notebook:2026-11-30; a large image can take several minutes." + wait},
		"pulled": {&spawner.Settings{}, kubeEvent("Pulled", "Normal",
			`Successfully pulled image "quay.io/jupyter/scipy-notebook:2026-11-30" in 41.2s (41.2s including waiting). Image size: 1570000000 bytes.`),
			"Downloaded the image quay.io/jupyter/scipy-notebook:2026-11-30 in 41.2s."},
		"already present": {&spawner.Settings{}, kubeEvent("Pulled", "Normal", `Container image "quay.io/jupyter/r-notebook:2026-11-30" already present on machine`),
			"The image quay.io/jupyter/r-notebook:2026-11-30 is already on the node."},
		"pull failed, not found": {&spawner.Settings{}, kubeEvent("Failed", "Warning",
			`Failed to pull image "quay.io/jupyter/scipy-notebook:nope": rpc error: code = NotFound desc = failed to pull and unpack image "quay.io/jupyter/scipy-notebook:nope": not found`),
			"The image quay.io/jupyter/scipy-notebook:nope could not be downloaded: the registry does not have it, so the image name or tag may be wrong. Kubernetes keeps retrying." + wait},
		"pull failed, denied": {&spawner.Settings{}, kubeEvent("Failed", "Warning",
			`Failed to pull image "ghcr.io/ucsd-ets/private:1": rpc error: code = Unknown desc = failed to authorize: 401 unauthorized`),
			"The image ghcr.io/ucsd-ets/private:1 could not be downloaded: the registry refused access to it. Kubernetes keeps retrying." + wait},
		"ErrImagePull": {&spawner.Settings{}, kubeEvent("Failed", "Warning", "Error: ErrImagePull"),
			"Downloading the server's image failed (ErrImagePull). Kubernetes keeps retrying." + wait},
		"ImagePullBackOff": {&spawner.Settings{}, kubeEvent("Failed", "Warning", "Error: ImagePullBackOff"),
			"Downloading the server's image keeps failing (ImagePullBackOff); Kubernetes waits longer before each new try." + wait},
		"back-off pulling image": {&spawner.Settings{}, kubeEvent("BackOff", "Normal", `Back-off pulling image "quay.io/jupyter/scipy-notebook:nope"`),
			"Downloading the image quay.io/jupyter/scipy-notebook:nope failed; Kubernetes waits before it tries again (ImagePullBackOff)." + wait},
		"CrashLoopBackOff": {&spawner.Settings{}, kubeEvent("BackOff", "Warning",
			"Back-off restarting failed container notebook in pod jupyter-alice_ns1(0f6b2c39-7f2e-4c1e-9a0e-3f1d2b7c9e11)"),
			"The server's container notebook keeps exiting right after it starts (CrashLoopBackOff); Kubernetes restarts it after a growing delay. The container's log says why it exits." + wait},
		"never pull": {&spawner.Settings{}, kubeEvent("ErrImageNeverPull", "Warning", `Container image "local/img:1" is not present with pull policy of Never`),
			"The image local/img:1 is not on the node, and the pull policy Never forbids downloading it." + wait},
		"mount failed": {&spawner.Settings{}, kubeEvent("FailedMount", "Warning", `MountVolume.SetUp failed for volume "home" : secret "home-keys" not found`),
			`The volume home could not be mounted (secret "home-keys" not found). Kubernetes keeps retrying.` + wait},
		"mount timed out": {&spawner.Settings{}, kubeEvent("FailedMount", "Warning",
			"Unable to attach or mount volumes: unmounted volumes=[home], unattached volumes=[home kube-api-access-x]: timed out waiting for the condition"),
			"The volume(s) home are not mounted yet. Kubernetes keeps retrying." + wait},
		"created": {&spawner.Settings{}, kubeEvent("Created", "Normal", "Container created"),
			"The server's container was created."},
		"started, kubelet": {&spawner.Settings{}, kubeEvent("Started", "Normal", "Container started"),
			"The server's container started."},
		"started, local-runtime node": {&spawner.Settings{}, kubeEvent("Started", "Normal", "Started container notebook"),
			"The server's container started."},
		"started, kwok": {&spawner.Settings{}, kubeEvent("Started", "Normal", "Started container"),
			"The server's container started."},
		"untranslated": {&spawner.Settings{}, kubeEvent("SomethingNew", "Normal", "A thing happened"),
			"A thing happened"},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNarrator(tc.settings, testLoc(t), nil)
			if got := n.headline(tc.ev, testNow, testDeadline); got != tc.want {
				t.Errorf("headline\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// fakeReservations is the engine's state: every a5000 GPU booked by
// another course until 17:30 UTC.
type fakeReservations struct{ capacity int }

func (f fakeReservations) Reservations() []reservation.Reservation {
	return []reservation.Reservation{
		{ID: 1, Kind: reservation.KindBooking, Owner: "prof", Workspace: "DSC20", Class: "a5000", GPUs: 8,
			Start: testNow.Add(-time.Hour), End: testNow.Add(50 * time.Minute), Status: reservation.StatusActive},
	}
}

func (f fakeReservations) Classes(time.Duration) ([]reservation.ClassStatus, error) {
	return []reservation.ClassStatus{{Class: "a5000", Capacity: f.capacity}}, nil
}

func engineEvent(reason, msg string) *corev1.Event {
	return &corev1.Event{Reason: reason, Type: "Warning", Message: msg, Source: corev1.EventSource{Component: reservation.Component}}
}

const deniedMsg = "On-demand GPU lease for 1 x a5000 was denied by the reservation service: Only 0 GPU(s) of class a5000 are free for on-demand use. " +
	"The pod stays Pending; the controller will keep retrying."

const (
	ignoredMsg = "The pod's annotation minimum-runtime-seconds=soon was ignored: it is not a positive whole number of seconds. " +
		"The default runtime of 1h is used instead. Remove or correct the annotation and recreate the pod if that is not what you want."
	ceilingMsg = "On-demand GPU lease for 1 x a5000 was denied by the reservation service: Only 0 GPU(s) of class a5000 are available to workspace 'DSC10' (its ceiling is 2). " +
		"The pod stays Pending; the controller will keep retrying."
)

// While the engine holds a GPU pod, its reason is the headline: with when
// a GPU could be free, and the scheduler's taint verdict repeats it.
func TestHeadlineKeepsTheEngineReason(t *testing.T) {
	m := &Manager{res: fakeReservations{capacity: 8}, clock: testingclock.NewFakeClock(testNow), log: zap.NewNop()}
	n := newNarrator(gpuSettings(), testLoc(t), m.gpuFreeAt)
	const free = " A GPU of class a5000 could be free from 2026-12-03 09:30:00 PST, when reserved use ends."
	const wait = " The spawn waits until 08:41:00 PST."
	taint := kubeEvent("FailedScheduling", "Warning",
		"0/8 nodes are available: 3 node(s) had untolerated taint(s), 5 node(s) didn't match Pod's node affinity/selector. preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling.")
	short := kubeEvent("FailedScheduling", "Warning",
		"0/8 nodes are available: 2 Insufficient nvidia.com/gpu, 6 node(s) didn't match Pod's node affinity/selector. preemption: 0/8 nodes are available: 8 Preemption is not helpful for scheduling.")
	for i, step := range []struct {
		ev   *corev1.Event
		want string
	}{
		{taint, "The GPU nodes of class a5000 are held for the GPU reservation system, which has not admitted this server yet." + wait},
		{engineEvent(reservation.OnDemandLeaseDenied, deniedMsg), deniedMsg + free + wait},
		{taint, deniedMsg + free + wait},
		// An ignored annotation is told, but the hold stays the headline's cause.
		{engineEvent(reservation.AnnotationIgnored, ignoredMsg), ignoredMsg},
		{taint, deniedMsg + free + wait},
		// A workspace's own ceiling is not freed by the class's reservations ending.
		{engineEvent(reservation.OnDemandLeaseDenied, ceilingMsg), ceilingMsg + wait},
		// A time the engine wrote is not repeated.
		{engineEvent(reservation.WaitingForReservation, "Waiting for your GPU reservation #3 (1 x a5000, 2026-12-03 09:00:00 PST to 2026-12-03 10:00:00 PST) to open; this pod will be admitted shortly after it does."),
			"Waiting for your GPU reservation #3 (1 x a5000, 2026-12-03 09:00:00 PST to 2026-12-03 10:00:00 PST) to open; this pod will be admitted shortly after it does." + wait},
		{engineEvent(reservation.RuntimeGuaranteed, "GPU access guaranteed for 1h09m59s, until 2026-12-03 09:50:00 PST. The pod may keep running after that, but can be preempted if reserved capacity is needed."),
			"GPU access guaranteed for 1h09m59s, until 2026-12-03 09:50:00 PST. The pod may keep running after that, but can be preempted if reserved capacity is needed."},
		// Admitted: the scheduler speaks for itself again.
		{short, "No node has 1 free nvidia.com/gpu (needed: 1 GPU, 2 CPU, 8 GiB memory), so the server waits for one to free up." + wait},
	} {
		if got := n.headline(step.ev, testNow, testDeadline); got != step.want {
			t.Errorf("step %d\n got %q\nwant %q", i, got, step.want)
		}
	}
}

func TestGPUsFreeAt(t *testing.T) {
	at := func(m int) time.Time { return testNow.Add(time.Duration(m) * time.Minute) }
	res := func(id int64, class string, gpus, from, to int, status reservation.Status) reservation.Reservation {
		return reservation.Reservation{ID: id, Class: class, GPUs: gpus, Start: at(from), End: at(to), Status: status}
	}
	for name, tc := range map[string]struct {
		rs             []reservation.Reservation
		capacity, gpus int
		want           time.Time
		ok             bool
	}{
		"first end frees one": {[]reservation.Reservation{
			res(1, "a5000", 4, -60, 30, reservation.StatusActive), res(2, "a5000", 4, -10, 90, reservation.StatusActive)}, 8, 1, at(30), true},
		"a booking starting then takes it": {[]reservation.Reservation{
			res(1, "a5000", 4, -60, 30, reservation.StatusActive), res(2, "a5000", 4, -10, 90, reservation.StatusActive),
			res(3, "a5000", 4, 30, 60, reservation.StatusActive)}, 8, 1, at(60), true},
		"two GPUs need both ends": {[]reservation.Reservation{
			res(1, "a5000", 1, -60, 20, reservation.StatusActive), res(2, "a5000", 7, -10, 40, reservation.StatusActive)}, 8, 2, at(40), true},
		"cancelled and other classes do not count": {[]reservation.Reservation{
			res(1, "a5000", 8, -60, 20, reservation.StatusActive), res(2, "a5000", 8, -10, 90, reservation.StatusCancelled),
			res(3, "a30", 2, -10, 5, reservation.StatusActive)}, 8, 1, at(20), true},
		"nothing ends":        {nil, 8, 1, time.Time{}, false},
		"more than the class": {[]reservation.Reservation{res(1, "a5000", 8, -60, 20, reservation.StatusActive)}, 8, 9, time.Time{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := gpusFreeAt(tc.rs, "a5000", tc.capacity, tc.gpus, testNow)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("gpusFreeAt = %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestNeedsOfPrefersGuarantees(t *testing.T) {
	s := &spawner.Settings{CPULimit: ptr.To(4.0), MemGuarantee: 2 << 30, MemLimit: 8 << 30,
		ExtraResourceLimits: spawner.ResourceMap{"nvidia.com/gpu": "2"}, ExtraResourceGuarantees: spawner.ResourceMap{"example.com/fpga": "1"}}
	n := newNarrator(s, time.UTC, nil)
	if got, want := n.needSummary(), "2 GPUs, 4 CPU, 2 GiB memory, 1 example.com/fpga"; got != want {
		t.Errorf("needs %q, want %q", got, want)
	}
	if q := n.needs[corev1.ResourceMemory]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("memory %s, want the guarantee", q.String())
	}
}

func TestMissingEvents(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{
		Conditions:        []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "notebook", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}}
	if got := missingEvents(pod, map[string]bool{}); len(got) != 2 || got[0] != "Scheduled" || got[1] != "Started" {
		t.Errorf("missing %v, want Scheduled and Started", got)
	}
	if got := missingEvents(pod, map[string]bool{"Scheduled": true, "Started": true}); len(got) != 0 {
		t.Errorf("missing %v with both seen", got)
	}
	if got := missingEvents(&corev1.Pod{}, map[string]bool{}); len(got) != 0 {
		t.Errorf("an unbound pod with no running container expects %v", got)
	}
}
