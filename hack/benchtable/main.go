// Command benchtable turns `go test -bench` output into one table: every
// metric a benchmark reported, its target where the project has one, and
// whether it was met. `make bench` pipes its run through it.
//
//	go test -run '^$' -bench . ./... | go run ./hack/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// target is what a metric must be: at most (or at least) a value.
type target struct {
	bench  string // a path.Match pattern of the benchmark's name (without -N)
	unit   string
	atMost bool
	value  float64
}

func (t target) String() string {
	op := "≥"
	if t.atMost {
		op = "≤"
	}
	return op + " " + strconv.FormatFloat(t.value, 'g', -1, 64)
}

func (t target) met(v float64) bool {
	if t.atMost {
		return v <= t.value
	}
	return v >= t.value
}

// targets are the project's performance goals (README, Performance).
var targets = []target{
	// Spawns at the API server's pace, one write each.
	{"BenchmarkSpawnStorm*", "x-bare-rate", false, 0.95},
	{"BenchmarkSpawnStorm*", "writes/spawn", true, 1},
	// Cheap polls at 10,000 servers.
	{"BenchmarkPollHTTP*", "polls/s", false, 40000},
	{"BenchmarkPollHTTP*", "cpu-µs/poll", true, 10},
	{"BenchmarkPollHTTP*", "server-p99-µs", true, 100},
	// The same through the hub class's batched poll (a batch's p99).
	{"BenchmarkPollHTTP*", "batch-polls/s", false, 40000},
	{"BenchmarkPollHTTP*", "batch-cpu-µs/poll", true, 10},
	{"BenchmarkPollHTTP*", "batch-server-p99-µs", true, 100},
	// 1,000 stops at once.
	{"BenchmarkStopReaction*", "hub-p99-ms", true, 500},
	{"BenchmarkStopReaction*", "delete-p99-ms", true, 500},
	// Scale.
	{"BenchmarkCache*", "bytes/pod", true, 3072},
	{"BenchmarkColdStart*", "s-ready", true, 5},
	{"BenchmarkAdmission*", "admitted/s", false, 100},
	// The console with 2,000 servers and 100,000 history rows.
	{"BenchmarkConsole*", "servers-p95-ms", true, 300},
	{"BenchmarkConsole*", "search-p95-ms", true, 500},
	{"BenchmarkConsole*", "browser-servers-p95-ms", true, 300},
	{"BenchmarkConsole*", "browser-sessions-p95-ms", true, 500},
}

// row is one metric of one benchmark.
type row struct {
	bench, unit string
	value       float64
}

var (
	// A result line: name, iterations, then value-unit pairs.
	resultLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	procSuffix = regexp.MustCompile(`-\d+$`)
)

func parse(r io.Reader, echo io.Writer) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if echo != nil {
			fmt.Fprintln(echo, line)
		}
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := procSuffix.ReplaceAllString(m[1], "")
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || f[i+1] == "ns/op" {
				continue
			}
			rows = append(rows, row{bench: name, unit: f[i+1], value: v})
		}
	}
	return rows, sc.Err()
}

func targetOf(r row) (target, bool) {
	for _, t := range targets {
		top, _, _ := strings.Cut(r.bench, "/")
		if ok, _ := path.Match(t.bench, top); ok && t.unit == r.unit {
			return t, true
		}
	}
	return target{}, false
}

func main() {
	rows, err := parse(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tMETRIC\tVALUE\tTARGET\tMET")
	missed := 0
	for _, r := range rows {
		tgt, met := "-", "-"
		if t, ok := targetOf(r); ok {
			tgt, met = t.String(), "yes"
			if !t.met(r.value) {
				met, missed = "NO", missed+1
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.bench, r.unit, strconv.FormatFloat(r.value, 'g', 5, 64), tgt, met)
	}
	_ = tw.Flush()
	fmt.Printf("\n%d metrics, %d targets missed\n", len(rows), missed)
}
