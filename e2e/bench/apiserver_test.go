package bench_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsmlp/spawner/e2e/harness"
)

// apiserverProfileWindow is how long the API server's CPU profile runs from
// a storm's start: longer than either storm, so that each profile holds the
// whole storm's work and the two can be subtracted.
const apiserverProfileWindow = 25 * time.Second

// apiserverTrace records what the API server did during one storm: its CPU
// profile and its request and watch counters.
type apiserverTrace struct {
	start   time.Time
	before  metrics
	after   metrics
	prof    []byte
	profErr error
	wg      sync.WaitGroup
}

// traceAPIServer scrapes the API server's counters and starts its CPU
// profile; finish ends the trace.
func traceAPIServer(ctx context.Context) (*apiserverTrace, error) {
	before, err := apiserverMetrics(ctx)
	if err != nil {
		return nil, err
	}
	t := &apiserverTrace{start: time.Now(), before: before}
	t.wg.Go(func() {
		t.prof, t.profErr = harness.APIServerProfile(ctx, env.Client, apiserverProfileWindow)
	})
	return t, nil
}

// finish scrapes the counters at the storm's end, then waits for the
// profile. It says whether the storm ended inside the profile's window.
func (t *apiserverTrace) finish(ctx context.Context, stormEnd time.Time) error {
	after, err := apiserverMetrics(ctx)
	t.after = after
	t.wg.Wait()
	if err != nil {
		return err
	}
	if t.profErr != nil {
		return t.profErr
	}
	if d := stormEnd.Sub(t.start); d > apiserverProfileWindow {
		return fmt.Errorf("the storm took %s, longer than the API server's profile (%s)", secs(d), apiserverProfileWindow)
	}
	return nil
}

// The rows of apiserverCounters that are not counters of requests or watches.
const (
	heapAtStart = "heap in use at the start, MiB"
	collections = "garbage collections"
)

// apiserverCounters sums, between two scrapes of the API server, the
// counters that tell its work apart: requests by verb and resource, watch
// events sent to watchers (count and bytes), the events its watch cache
// dispatched, by resource or kind, and its garbage collections; and its heap
// in use at the first scrape.
func apiserverCounters(before, after metrics) map[string]float64 {
	out := map[string]float64{}
	for series := range after {
		// The API server's own heap and collections: a storm right after
		// a benchmark that filled the cluster found it collecting more.
		switch series {
		case "go_memstats_heap_inuse_bytes":
			out[heapAtStart] = before[series] / (1 << 20)
			continue
		case "go_gc_duration_seconds_count":
			out[collections] = delta(before, after, series)
			continue
		}
		name, labels, ok := strings.Cut(series, "{")
		if !ok {
			continue
		}
		ls := parseLabels(strings.TrimSuffix(labels, "}"))
		var key string
		switch name {
		case "apiserver_request_total":
			key = ls["verb"] + " " + ls["resource"]
			if ls["subresource"] != "" {
				key += "/" + ls["subresource"]
			}
			key = "requests: " + key
		case "apiserver_watch_events_total":
			key = "watch events sent: " + kindOf(ls)
		case "apiserver_watch_events_sizes_sum":
			key = "watch event bytes sent: " + kindOf(ls)
		case "apiserver_watch_cache_events_dispatched_total":
			key = "watch cache events dispatched: " + kindOf(ls)
		case "apiserver_terminated_watchers_total":
			// The watch cache closes a watcher whose buffer stays full for
			// its dispatch budget: the client then lists or watches again.
			key = "watchers closed as unresponsive: " + kindOf(ls)
		default:
			continue
		}
		out[key] += delta(before, after, series)
	}
	return out
}

// kindOf is what a watch series counts: its kind or resource label,
// whichever the API server's version prints.
func kindOf(ls map[string]string) string {
	for _, k := range []string{"kind", "resource"} {
		if v := ls[k]; v != "" {
			return v
		}
	}
	return "(unlabelled)"
}

// showAPIServerWork prints the API server's counters of the storms side by
// side, and where its CPU went in the storm through spawnerd beyond the
// bare loop's: pprof's top of the one profile with the other as its base.
func showAPIServerWork(ctx context.Context, b *testing.B, via, bare, yielded *apiserverTrace) error {
	runs := []map[string]float64{
		apiserverCounters(via.before, via.after),
		apiserverCounters(bare.before, bare.after),
		apiserverCounters(yielded.before, yielded.after),
	}
	// A counter that stays under 10 in every storm is the cluster's
	// background (a configuration watch's bookmark), not the storm's work;
	// the heap and the collections are shown whatever their size.
	keys := map[string]bool{heapAtStart: true, collections: true}
	for _, c := range runs {
		for k, v := range c {
			keys[k] = keys[k] || v >= 10
		}
	}
	rows := [][]string{{"API server, from the storm's start to its end", "through spawnerd", "bare loop", "difference", "spawnerd and clients at nice 19"}}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !keys[k] {
			continue
		}
		n := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
		rows = append(rows, []string{k, n(runs[0][k]), n(runs[1][k]), n(runs[0][k] - runs[1][k]), n(runs[2][k])})
	}
	show(table("The API server's work in the storms (apiserver_request_total, apiserver_terminated_watchers_total, apiserver_watch_events_*, apiserver_watch_cache_events_dispatched_total)", rows))
	base := filepath.Join(b.TempDir(), "bare.pprof")
	if err := os.WriteFile(base, bare.prof, 0o644); err != nil {
		return err
	}
	what := fmt.Sprintf("the API server in the storm through spawnerd, less the bare loop's storm; each profile %s from its storm's start", apiserverProfileWindow)
	return pprofTop(ctx, b, what, via.prof, "-diff_base="+base)
}
