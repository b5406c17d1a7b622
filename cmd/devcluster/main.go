// Command devcluster runs a local Kubernetes control plane on loopback.
//
//	devcluster up [--dir D] [--bin-dir B] [--nodes FILE]   # foreground; Ctrl-C stops everything
//	devcluster down --dir D                              # stop a cluster started elsewhere
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/devcluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: devcluster up [--dir D] [--bin-dir B] [--nodes FILE] | devcluster down --dir D")
	os.Exit(2)
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "", "state folder (default: a new temporary folder)")
	binDir := fs.String("bin-dir", os.Getenv("DEVCLUSTER_BIN_DIR"), "folder with etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok (default $DEVCLUSTER_BIN_DIR)")
	nodesFile := fs.String("nodes", "", "node-set file (default: the built-in CPU and GPU nodes)")
	_ = fs.Parse(args)
	if *binDir == "" {
		return fmt.Errorf("--bin-dir or $DEVCLUSTER_BIN_DIR is required (make tools prints it)")
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "devcluster-")
		if err != nil {
			return err
		}
		*dir = d
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	nodes := devcluster.DefaultNodeConfig()
	if *nodesFile != "" {
		if nodes, err = devcluster.LoadNodeConfig(*nodesFile); err != nil {
			return err
		}
	}
	logger, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cluster, err := devcluster.Start(ctx, devcluster.Options{Dir: abs, BinDir: *binDir, Nodes: nodes, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Printf("KUBECONFIG=%s\n", cluster.Kubeconfig())
	<-ctx.Done()
	logger.Info("stopping")
	cluster.Stop()
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", "", "state folder of the cluster to stop")
	_ = fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("--dir is required")
	}
	return devcluster.Down(*dir, 30*time.Second)
}
