package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// EvictionMessage is the kubelet's message in seed 003's evicted pod.
const EvictionMessage = "The node was low on resource: memory. Container notebook was using 1900004Ki, which exceeds its request of 471859200."

// Evict makes a pod look exactly like seed 003's evicted pod: phase Failed,
// reason Evicted, the kubelet's message, and the container statuses left as
// they were (the kubelet does not update them on eviction).
func Evict(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	return updateStatus(ctx, c, ns, name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = "Evicted"
		p.Status.Message = EvictionMessage
	})
}

// TerminateContainer gives a container a terminated state with exitCode and
// reason (e.g. 137, OOMKilled) and sets the phase as the kubelet would once
// it has given up on restarting: Failed/Succeeded only when every container
// has ended and the restart policy lets the pod end.
func TerminateContainer(ctx context.Context, c kubernetes.Interface, ns, name, container string, exitCode int32, reason string) error {
	return updateStatus(ctx, c, ns, name, func(p *corev1.Pod) {
		found := false
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			if cs.Name != container {
				continue
			}
			found = true
			terminate(cs, exitCode, reason)
		}
		if !found {
			cs := corev1.ContainerStatus{Name: container}
			terminate(&cs, exitCode, reason)
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
		}
		setReady(p, false)
		allDone, anyFailed := true, false
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated == nil {
				allDone = false
			} else if cs.State.Terminated.ExitCode != 0 {
				anyFailed = true
			}
		}
		switch {
		case !allDone || p.Spec.RestartPolicy == corev1.RestartPolicyAlways:
		case !anyFailed:
			p.Status.Phase = corev1.PodSucceeded
		case p.Spec.RestartPolicy == corev1.RestartPolicyNever:
			p.Status.Phase = corev1.PodFailed
		}
	})
}

// MarkSucceeded ends every container with exit code 0 and the pod with phase Succeeded.
func MarkSucceeded(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	return updateStatus(ctx, c, ns, name, func(p *corev1.Pod) {
		for i := range p.Status.ContainerStatuses {
			terminate(&p.Status.ContainerStatuses[i], 0, "Completed")
		}
		setReady(p, false)
		p.Status.Phase = corev1.PodSucceeded
	})
}

// DeletePodOutOfBand deletes a pod at once, as `kubectl delete --grace-period=0 --force` does.
func DeletePodOutOfBand(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	if err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// DeleteNode removes a node object, as a cloud provider does when the machine is gone.
func DeleteNode(ctx context.Context, c kubernetes.Interface, name string) error {
	if err := c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting node %s: %w", name, err)
	}
	return nil
}

// RestartAPIServer stops and starts the cluster's kube-apiserver.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	return e.Cluster.RestartAPIServer(ctx)
}

func terminate(cs *corev1.ContainerStatus, exitCode int32, reason string) {
	now := metav1.Now()
	started := now
	if cs.State.Running != nil {
		started = cs.State.Running.StartedAt
	}
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: exitCode, Reason: reason, StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID,
	}}
	cs.Ready = false
	cs.Started = ptr.To(false)
}

func setReady(p *corev1.Pod, ready bool) {
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	for i := range p.Status.Conditions {
		t := p.Status.Conditions[i].Type
		if (t == corev1.PodReady || t == corev1.ContainersReady) && p.Status.Conditions[i].Status != s {
			p.Status.Conditions[i].Status = s
			p.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
}

func updateStatus(ctx context.Context, c kubernetes.Interface, ns, name string, mutate func(*corev1.Pod)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(p)
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating status of pod %s/%s: %w", ns, name, err)
	}
	return nil
}
