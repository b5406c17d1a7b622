package main

import (
	"strings"
	"testing"
)

func TestParseAndTargets(t *testing.T) {
	out := `goos: linux
BenchmarkSpawnStorm-2        1    9 ns/op    64.5 spawns/s    0.91 x-bare-rate    1.000 writes/spawn
BenchmarkConsole/postgres-2  1    5 ns/op    59.9 servers-p95-ms
--- some log line BenchmarkFake 1 2 x
ok  	github.com/dsmlp/spawner/e2e/bench	120.0s
`
	rows, err := parse(strings.NewReader(out), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("rows %+v, want 4 (ns/op left out)", rows)
	}
	want := map[string]string{"spawns/s": "", "x-bare-rate": "NO", "writes/spawn": "yes", "servers-p95-ms": "yes"}
	for _, r := range rows {
		got := ""
		if tg, ok := targetOf(r); ok {
			got = "yes"
			if !tg.met(r.value) {
				got = "NO"
			}
		}
		if got != want[r.unit] {
			t.Errorf("%s %s = %v: met %q, want %q", r.bench, r.unit, r.value, got, want[r.unit])
		}
	}
	if rows[3].bench != "BenchmarkConsole/postgres" {
		t.Errorf("name %q: the -N suffix stays on", rows[3].bench)
	}
}
