// Package spark_test drives the real spawnerd binary against the dev
// cluster (real API server, scheduler and controller-manager: Deployments,
// ReplicaSets, EndpointSlices and the garbage collector are real; kwok
// nodes run pods at once) with profiles that declare Spark clusters.
//
//	go test ./e2e/spark/                               # the tests
//	go test -run '^$' -bench . -timeout 30m ./e2e/spark/   # the storm benchmark
package spark_test

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
)

var (
	env *harness.Env
	bin string
)

func TestMain(m *testing.M) {
	// The benchmark's 200 environments are 800 pods (notebook, master, two
	// workers each) needing 360 cores: 10 nodes of 64 cores and 110 pods
	// leave room; the tests use a corner of it.
	nodes := &devcluster.NodeConfig{
		NodeSets:     []devcluster.NodeSet{{Name: "cpu", Count: 10, CPU: "64", Memory: "512Gi", Pods: 110}},
		LocalRuntime: ptr.To(false),
	}
	dir, err := os.MkdirTemp("", "spark-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := harness.Main(m, &env, nodes, func(e *harness.Env) error {
		bin, err = harness.BuildBinary(e.RepoDir, "./cmd/spawnerd", dir)
		return err
	})
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
