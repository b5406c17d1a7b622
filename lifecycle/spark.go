package lifecycle

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/sparkcluster"
	"github.com/dsmlp/spawner/spawner"
)

// SparkClusters is what a server's life needs of the Spark cluster its
// notebook pod owns; *sparkcluster.Reconciler implements it. Every method
// finds the cluster from the cluster's own objects (by the notebook pod and
// the server's identity), so any replica can call any of them. Without
// Spark in the configuration the manager uses noSpark.
type SparkClusters interface {
	// Run runs the caches and the reconciler until ctx ends; HasSynced
	// reports whether the caches hold a full LIST.
	Run(ctx context.Context) error
	HasSynced() bool
	// Admit refuses, before anything is created, a cluster the namespace's
	// quota cannot hold; Ensure creates it owned by the notebook pod. Both
	// take a nil cluster for none.
	Admit(ctx context.Context, objs *spawner.Objects, c *spawner.SparkCluster) error
	Ensure(ctx context.Context, c *spawner.SparkCluster, nb sparkcluster.Notebook, wait time.Duration) error
	// Remove deletes the notebook's cluster; WaitGone waits until nothing
	// of it is left.
	Remove(ctx context.Context, nb sparkcluster.Notebook) error
	WaitGone(ctx context.Context, nb sparkcluster.Notebook, wait time.Duration) error
	// Subscribe signals changes to the cluster; Status reports it (nil:
	// none) and Failure says why it cannot come up ("": it can).
	Subscribe(nb sparkcluster.Notebook) (<-chan struct{}, func())
	Status(nb sparkcluster.Notebook) *sparkcluster.Status
	Failure(ctx context.Context, nb sparkcluster.Notebook) string
}

// errNoSpark is a defect: UsesSpark covers every override.
var errNoSpark = errors.New("spark cluster requested but Spark support is not set up")

// noSpark is SparkClusters for a configuration that declares no cluster.
type noSpark struct{}

func (noSpark) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (noSpark) HasSynced() bool { return true }

func (noSpark) Admit(_ context.Context, _ *spawner.Objects, c *spawner.SparkCluster) error {
	if c != nil {
		return errNoSpark
	}
	return nil
}

func (noSpark) Ensure(_ context.Context, c *spawner.SparkCluster, _ sparkcluster.Notebook, _ time.Duration) error {
	if c != nil {
		return errNoSpark
	}
	return nil
}

func (noSpark) Remove(context.Context, sparkcluster.Notebook) error { return nil }

func (noSpark) WaitGone(context.Context, sparkcluster.Notebook, time.Duration) error { return nil }

func (noSpark) Subscribe(sparkcluster.Notebook) (<-chan struct{}, func()) { return nil, func() {} }

func (noSpark) Status(sparkcluster.Notebook) *sparkcluster.Status { return nil }

func (noSpark) Failure(context.Context, sparkcluster.Notebook) string { return "" }

// initSpark sets the manager's Spark clusters: the given ones, else a
// reconciler when some spawn can declare a cluster, else none.
func (m *Manager) initSpark(given SparkClusters) error {
	switch {
	case given != nil:
		m.spark = given
	case m.cfg.UsesSpark():
		ns := m.base.Namespace
		if m.base.EnableUserNamespaces {
			ns = ""
		}
		r, err := sparkcluster.New(m.client, ns, m.watcher, sparkcluster.Options{Logger: m.log, Clock: m.clock})
		if err != nil {
			return err
		}
		m.spark = r
	default:
		m.spark = noSpark{}
	}
	return nil
}

// Run runs the manager's own caches and workers, those of the Spark
// clusters, until ctx ends. Without Spark in the configuration it only
// waits for ctx.
func (m *Manager) Run(ctx context.Context) error { return m.spark.Run(ctx) }

// HasSynced reports whether the manager's caches hold a full LIST; /readyz
// reports it beside the pod watcher's.
func (m *Manager) HasSynced() bool { return m.spark.HasSynced() }

// sparkNotebook names the notebook pod of a server as the owner of its
// Spark cluster.
func sparkNotebook(key Key, ref podRef, uid types.UID) sparkcluster.Notebook {
	return sparkcluster.Notebook{Namespace: ref.namespace, Pod: ref.name, UID: uid, User: key.User, Server: key.Server}
}

func (sp *spawn) notebook() sparkcluster.Notebook { return sparkNotebook(sp.key, sp.ref, sp.uid) }

// sparkProgress appends a progress event for each new milestone of the
// spawn's cluster and returns the progress reached.
func (m *Manager) sparkProgress(sp *spawn, progress int) int {
	for _, msg := range sp.sparkSeen.Next(m.spark.Status(sp.notebook())) {
		progress += (90 - progress) / 3
		p := progress
		sp.events.append(Event{Progress: &p, Message: msg})
	}
	return progress
}

// sparkError gives a refusal of the Spark cluster the manager's sentinel,
// which hubapi maps to a status, keeping its message.
func sparkError(err error) error {
	switch {
	case errors.Is(err, sparkcluster.ErrConflict):
		return &sentinelError{err: err, sentinel: ErrConflict}
	case errors.Is(err, sparkcluster.ErrQuota):
		return &sentinelError{err: err, sentinel: ErrQuota}
	}
	return err
}

type sentinelError struct{ err, sentinel error }

func (e *sentinelError) Error() string   { return e.err.Error() }
func (e *sentinelError) Unwrap() []error { return []error{e.err, e.sentinel} }

// undoStart removes what a start created before it failed: the notebook pod
// and whatever of its cluster exists.
func (m *Manager) undoStart(ctx context.Context, key Key, ref podRef, uid types.UID, log *zap.Logger) {
	m.watcher.ExpectStop(ref.namespace, ref.name)
	// Wait for the cache too, so that a poll right after the refusal does
	// not report the removed pod as pending.
	if err := m.deletePodAndWait(ctx, ref, uid, 0, 10*time.Second); err != nil {
		log.Warn("start: removing the pod failed", zap.Error(err))
	}
	// The cache may not show objects created a moment ago; the garbage
	// collector removes those with the pod they belong to.
	if err := m.spark.Remove(ctx, sparkNotebook(key, ref, uid)); err != nil {
		log.Warn("start: removing the Spark cluster failed", zap.Error(err))
	}
}
