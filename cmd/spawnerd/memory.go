package main

import (
	"math"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// gcPercent is the garbage collector's target unless GOGC says otherwise.
// At Go's default of 100, collection took 12 % of spawnerd's CPU in a spawn
// storm, on cores it shares with the API server; at 400 it took 4 %. The
// heap may then grow to five times what is live between collections, so
// tuneMemory also bounds it by the container's memory limit.
const gcPercent = 400

// memoryLimitRatio is the share of the container's memory limit the Go
// runtime may use (GOMEMLIMIT): the rest is for what it does not manage,
// such as SQLite's page cache.
const memoryLimitRatio = 0.9

// tuneMemory sets the GC target unless GOGC is set, and GOMEMLIMIT to
// memoryLimitRatio of the cgroup's memory limit unless GOMEMLIMIT is set.
// lookupEnv is os.LookupEnv.
func tuneMemory(log *zap.Logger, lookupEnv func(string) (string, bool)) {
	gogc, set := lookupEnv("GOGC")
	if !set {
		debug.SetGCPercent(gcPercent)
		gogc = strconv.Itoa(gcPercent)
	}
	fields := []zap.Field{zap.String("gogc", gogc)}
	limit, err := memlimit.Set(memlimit.WithProvider(memlimit.FromCgroup), memlimit.WithRatio(memoryLimitRatio))
	switch {
	case err != nil:
		fields = append(fields, zap.NamedError("memory_limit_error", err))
	case limit == math.MaxInt64:
		fields = append(fields, zap.String("memory_limit", "none"))
	default:
		fields = append(fields, zap.Int64("memory_limit_bytes", limit))
	}
	log.Info("garbage collection tuned", fields...)
}
