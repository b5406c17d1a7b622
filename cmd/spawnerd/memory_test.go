package main

import (
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

func TestTuneMemorySetsGCPercentOnlyWithoutGOGC(t *testing.T) {
	prevLimit := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prevLimit)
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	tuneMemory(zap.NewNop(), func(string) (string, bool) { return "", false })
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, gcPercent)
	}
	tuneMemory(zap.NewNop(), func(k string) (string, bool) { return "150", k == "GOGC" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC set: GC percent changed to %d, want the runtime's own (100 here)", got)
	}
}
