package reservation

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchClasses and benchWorkspaces shape the synthetic cluster: five
// classes, ten course workspaces.
const (
	benchClasses    = 5
	benchWorkspaces = 10
)

func benchConfig() Config {
	cfg := Config{Seed: 42}
	for i := range benchClasses {
		name := fmt.Sprintf("class-%d", i)
		cfg.Classes = append(cfg.Classes, GPUClass{Label: name, NodeSelector: map[string]string{"gpu-type": name}})
	}
	for i := range benchWorkspaces {
		cfg.Workspaces = append(cfg.Workspaces, Workspace{Name: fmt.Sprintf("COURSE%02d", i), Caps: map[string]int{"class-0": 64}})
	}
	return cfg
}

func benchNodes(n, gpus int) []*corev1.Node {
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		nodes[i] = newNode(fmt.Sprintf("gpu-%04d", i), fmt.Sprintf("class-%d", i%benchClasses), gpus)
	}
	return nodes
}

// benchPod is a pending launcher-made GPU pod with realistic metadata.
func benchPod(i int, now time.Time) *corev1.Pod {
	user := fmt.Sprintf("user%05d", i)
	class := fmt.Sprintf("class-%d", i%benchClasses)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: user, Name: "jupyter-" + user, UID: types.UID(fmt.Sprintf("5b0e6c1e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: metav1.NewTime(now.Add(-time.Duration(i) * time.Second)),
			Labels: map[string]string{
				ClassLabel: class, WorkspaceLabel: fmt.Sprintf("COURSE%02d", i%benchWorkspaces), "dsmlp/user": user,
				"app": "jupyterhub", "component": "singleuser-server", "hub.jupyter.org/username": user,
			},
			Annotations: map[string]string{"hub.jupyter.org/username": user},
		},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"gpu-type": class},
			Containers: []corev1.Container{{Name: "notebook", Image: "ghcr.io/ucsd-ets/scipy-ml-notebook:stable",
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{GPUResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
					Requests: corev1.ResourceList{GPUResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1000 nodes are available: 1000 node(s) had untolerated taint(s).",
		}}},
	}
}

// cpuMeter reports CPU milliseconds per operation between start and stop.
type cpuMeter struct {
	b     *testing.B
	total time.Duration
	at    time.Duration
}

func (m *cpuMeter) start() { m.at, _ = processCPU() }
func (m *cpuMeter) stop() {
	now, _ := processCPU()
	m.total += now - m.at
}
func (m *cpuMeter) report(perOp float64, unit string) {
	if _, ok := processCPU(); ok {
		m.b.ReportMetric(float64(m.total.Microseconds())/1000/perOp, unit)
	}
}

// routingSnapshot is n pending pods: a third wait for a booking opening
// soon, a sixth are admitted under an open booking, the rest go the lease
// path (granted while the class has room, then denied for capacity).
func routingSnapshot(n int) Snapshot {
	now := t0
	snap := Snapshot{Now: now, Nodes: benchNodes(100, 8)}
	for i := range n {
		p := benchPod(i, now)
		snap.Pods = append(snap.Pods, p)
		owner, class, ws := p.Namespace, p.Labels[ClassLabel], p.Labels[WorkspaceLabel]
		switch i % 6 {
		case 0, 1:
			snap.Reservations = append(snap.Reservations, booking(int64(i+1), owner, ws, class, 1, now.Add(20*time.Minute), now.Add(2*time.Hour)))
		case 2:
			snap.Reservations = append(snap.Reservations, booking(int64(i+1), owner, ws, class, 1, now.Add(-time.Hour), now.Add(time.Hour)))
		}
	}
	return snap
}

// BenchmarkRouting measures routing decisions per second: one Decide over
// 1,000 waiting pods routes each of them. "steady" repeats the cycle with
// the throttle holding back repeated events (the normal tick); "cold" is a
// fresh engine that renders and writes every event.
func BenchmarkRouting(b *testing.B) {
	const pods = 1000
	snap := routingSnapshot(pods)
	b.Run("steady", func(b *testing.B) {
		e := newEngine(b, func(c *Config) { *c = benchConfig() })
		e.Decide(snap)
		b.ReportAllocs()
		b.ResetTimer()
		m := cpuMeter{b: b}
		m.start()
		for range b.N {
			e.Decide(snap)
		}
		m.stop()
		b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "decisions/s")
		m.report(float64(b.N), "cpu-ms/op")
	})
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		m := cpuMeter{b: b}
		for range b.N {
			b.StopTimer()
			e := newEngine(b, func(c *Config) { *c = benchConfig() })
			b.StartTimer()
			m.start()
			plan := e.Decide(snap)
			m.stop()
			if len(plan.Events) == 0 || len(plan.Admissions) == 0 {
				b.Fatalf("plan has %d events, %d admissions", len(plan.Events), len(plan.Admissions))
			}
		}
		b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "decisions/s")
		m.report(float64(b.N), "cpu-ms/op")
	})
}

// sweepSnapshot is 10,000 admitted, bound pods on 1,000 nodes (10 GPUs
// each, every GPU in use): leases inside and past their guarantee, ended
// bookings, best-effort pods, and per class a booking starting in 10
// minutes that needs 100 GPUs, with 15 % headroom to keep.
func sweepSnapshot() Snapshot {
	now := t0
	const nodes, perNode = 1000, 10
	snap := Snapshot{Now: now, Nodes: benchNodes(nodes, perNode)}
	k := newAnnotationKeys(defaultPrefix)
	id := int64(0)
	for i := range nodes * perNode {
		p := benchPod(i, now)
		node := i % nodes
		class := fmt.Sprintf("class-%d", node%benchClasses)
		p.Labels[ClassLabel], p.Spec.NodeSelector["gpu-type"] = class, class
		p.Spec.NodeName = fmt.Sprintf("gpu-%04d", node)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning}
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: defaultTaintKey, Operator: corev1.TolerationOpEqual, Value: class, Effect: corev1.TaintEffectNoSchedule})
		id++
		r := Reservation{ID: id, Owner: p.Namespace, Workspace: p.Labels[WorkspaceLabel], Class: class, GPUs: 1, Status: StatusActive, PodUID: p.UID}
		switch i % 10 {
		case 0, 1: // best-effort
			r.Kind, r.Start, r.End = KindBestEffort, now.Add(-time.Hour), now.Add(-time.Hour)
		case 2, 3, 4: // lease inside its guarantee
			r.Kind, r.Start, r.End = KindOnDemand, now.Add(-30*time.Minute), now.Add(40*time.Minute)
		case 5, 6, 7: // lease past its guarantee
			r.Kind, r.Start, r.End = KindOnDemand, now.Add(-3*time.Hour), now.Add(-110*time.Minute)
		default: // booking that ended
			r.Kind, r.Start, r.End, r.PodUID = KindBooking, now.Add(-3*time.Hour), now.Add(-time.Hour), ""
		}
		snap.Reservations = append(snap.Reservations, r)
		st := admittedState{res: &r, className: class, now: r.Start, until: r.End, resolved: true, stamp: true}
		for key, v := range k.desired(nil, st) {
			p.Annotations[key] = v
		}
		snap.Pods = append(snap.Pods, p)
	}
	for c := range benchClasses {
		id++
		snap.Reservations = append(snap.Reservations, booking(id, "newcomer", "COURSE00", fmt.Sprintf("class-%d", c), 100, now.Add(10*time.Minute), now.Add(2*time.Hour)))
	}
	return snap
}

// BenchmarkPreemptionSweep times the sweep alone (step 5 of Decide) over
// 10,000 pods and 1,000 nodes, and the whole cycle over the same snapshot.
func BenchmarkPreemptionSweep(b *testing.B) {
	snap := sweepSnapshot()
	e := newEngine(b, func(c *Config) { *c = benchConfig() })
	b.Run("sweep", func(b *testing.B) {
		victims := 0
		m := cpuMeter{b: b}
		for range b.N {
			b.StopTimer()
			c := e.newCycle(snap.Now, &snap)
			c.resolveAdmitted()
			c.endLeases()
			c.cancelNoShows()
			b.StartTimer()
			m.start()
			c.sweep()
			m.stop()
			victims = len(c.plan.Evictions)
		}
		m.report(float64(b.N), "cpu-ms/sweep")
		if victims < benchClasses*100 {
			b.Fatalf("the sweep freed %d GPUs, want at least %d", victims, benchClasses*100)
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sweep")
	})
	b.Run("cycle", func(b *testing.B) {
		b.ReportAllocs()
		m := cpuMeter{b: b}
		m.start()
		for range b.N {
			e.Decide(snap)
		}
		m.stop()
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
		m.report(float64(b.N), "cpu-ms/cycle")
	})
}

// BenchmarkEngineMemory10kPending reports what an engine keeps between
// cycles with 10,000 pending GPU pods (throttle ledger and the rest), and
// the peak a cycle adds on top of the snapshot.
func BenchmarkEngineMemory10kPending(b *testing.B) {
	const pods = 10000
	snap := routingSnapshot(pods)
	var retained, peak uint64
	for range b.N {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		e := newEngine(b, func(c *Config) { *c = benchConfig() })
		e.Decide(snap)
		var during runtime.MemStats
		runtime.ReadMemStats(&during)
		peak = during.TotalAlloc - base.TotalAlloc
		if plan := e.Decide(snap); len(plan.Admissions) == 0 {
			b.Fatal("the second cycle admitted nothing")
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		retained = after.HeapAlloc - min(after.HeapAlloc, base.HeapAlloc)
		runtime.KeepAlive(e)
	}
	b.ReportMetric(float64(retained)/(1<<20), "retained-MB")
	b.ReportMetric(float64(peak)/(1<<20), "allocated-MB/cycle")
}
