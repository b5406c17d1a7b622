package reservation_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// BenchmarkAdmission measures pod ADD → admission with 1,000 and 10,000
// GPU pods already pending (each waiting for a booking that opens later):
// probe pods under an open booking are created one by one, and each one's
// latency runs from its create returning to the watch showing it admitted
// (the PATCH acknowledged and delivered). It also counts the controller's
// API writes per admission and during idle cycles (no-op reconcile).
func BenchmarkAdmission(b *testing.B) {
	for _, pending := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			for range b.N {
				benchAdmission(b, pending)
			}
		})
	}
}

func benchAdmission(b *testing.B, pending int) {
	ctx := context.Background()
	waitNS, probeNS := env.Namespace(b), env.Namespace(b)
	now := clk.Now()
	// The pending pods wait for a booking 25 minutes out; they hold no GPUs.
	book(b, waitNS, wsNoOD, "bench", 8, now.Add(25*time.Minute), now.Add(2*time.Hour))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	createMany(b, waitNS, pending, func(i int) *corev1.Pod {
		return gpuPod(fmt.Sprintf("wait-%05d", i), "bench", 1, workspace(wsNoOD))
	})
	// Every pending pod has been told why it waits.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		cs, err := ctl.Classes(time.Hour)
		if err != nil {
			return false, nil
		}
		for _, c := range cs {
			if c.Class == "bench" {
				return c.WaitingPods >= pending, nil
			}
		}
		return false, nil
	}); err != nil {
		b.Fatalf("pending pods never all seen: %v", err)
	}
	b.Logf("%d pending pods created and queued in %s", pending, time.Since(start).Round(time.Millisecond))
	drainEvents(b) // every pending pod has been told why it waits
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	const probes = 100
	book(b, probeNS, wsCourse, "bench", probes, now.Add(-time.Minute), now.Add(3*time.Hour))
	w, err := env.Client.CoreV1().Pods(probeNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created := map[string]time.Time{}
	lat := make([]time.Duration, 0, probes)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || !admitted(p) {
				continue
			}
			mu.Lock()
			if t0, ok := created[p.Name]; ok {
				lat = append(lat, time.Since(t0))
				delete(created, p.Name)
			}
			n := len(lat)
			mu.Unlock()
			if n == probes {
				return
			}
		}
	}()
	w0 := writes.Load()
	b.ResetTimer()
	for i := range probes {
		p := gpuPod(fmt.Sprintf("probe-%03d", i), "bench", 1)
		mu.Lock()
		created[p.Name] = time.Now()
		mu.Unlock()
		if _, err := env.Client.CoreV1().Pods(probeNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // 20 pods/s, each measured on its own
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d probes admitted", len(lat), probes)
	}
	b.StopTimer()
	time.Sleep(time.Second) // events of the last admissions
	drainEvents(b)
	perAdmission := float64(writes.Load()-w0) / probes

	// Idle cycles: time moves a minute, ticks fire, nothing changed.
	w1 := writes.Load()
	for range 5 {
		step(time.Second)
		time.Sleep(400 * time.Millisecond)
	}
	idle := writes.Load() - w1

	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max_ms")
	b.ReportMetric(perAdmission, "writes/admission")
	b.ReportMetric(float64(idle), "idle_writes")
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "heap_MB_for_pending")
	b.Logf("pending=%d: admission p50 %.1f ms p99 %.1f ms max %.1f ms; %.2f writes/admission; %d writes in 5 idle cycles; heap +%.1f MB",
		pending, pct(0.5), pct(0.99), float64(lat[len(lat)-1].Microseconds())/1000, perAdmission, idle,
		float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20))
}

func drainEvents(b *testing.B) {
	b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return ctl.EventBacklog() == 0, nil
	})
	if err != nil {
		b.Fatalf("waiting events never drained: %d queued", ctl.EventBacklog())
	}
}

func createMany(b *testing.B, ns string, n int, mk func(int) *corev1.Pod) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), mk(i), metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("creating pending pods: %v", err)
	}
}
