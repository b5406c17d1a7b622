package reservation_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/gpucontroller"
	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/reservationstore"
)

// impersonate returns a client acting as user, who may edit namespace-
// scoped objects everywhere (as a student may in their own namespace).
func impersonate(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(env.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The binding takes a moment to reach the authorizer.
	if err := wait.PollUntilContextTimeout(ctx, poll, waitFor, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("%s never got the edit role", user)
	}
	return c
}

func gpuTemplate(class string) corev1.PodTemplateSpec {
	p := gpuPod("", class, 1)
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		reservation.ClassLabel: class, reservation.WorkspaceLabel: wsCourse, "app": "gpu-work"}}, Spec: p.Spec}
}

// A Job and a Deployment with the class label are routed like a spawned
// pod: the webhook gives their templates and pods the class node selection
// and /etc/podinfo, and the engine admits their pods.
func TestJobAndDeploymentAdmitted(t *testing.T) {
	n := env.Namespace(t)
	ctx := context.Background()
	jobT := gpuTemplate("work")
	jobT.Spec.RestartPolicy = corev1.RestartPolicyNever
	// The webhook selects objects by their own labels: the class label on
	// the Job and Deployment themselves gets their templates mutated.
	classLabel := map[string]string{reservation.ClassLabel: "work"}
	job, err := env.Client.BatchV1().Jobs(n).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Labels: classLabel},
		Spec: batchv1.JobSpec{Template: jobT, BackoffLimit: ptr.To[int32](0)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if job.Spec.Template.Spec.NodeSelector[devcluster.LabelGPUClass] != "work" {
		t.Errorf("job template not given the class node selection: %v", job.Spec.Template.Spec.NodeSelector)
	}
	depT := gpuTemplate("work")
	dep, err := env.Client.AppsV1().Deployments(n).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "serve", Labels: classLabel},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "gpu-work"}}, Template: depT}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Template.Spec.NodeSelector[devcluster.LabelGPUClass] != "work" || len(dep.Spec.Template.Spec.Volumes) == 0 {
		t.Errorf("deployment template not mutated: %+v", dep.Spec.Template.Spec)
	}
	var pods []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, poll, waitFor, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods = list.Items
		ok := 0
		for i := range pods {
			if admitted(&pods[i]) && pods[i].Spec.NodeName != "" {
				ok++
			}
		}
		return ok == 3, nil
	})
	if err != nil {
		t.Fatalf("want the job's pod and both replicas admitted and bound; pods: %v", podSummary(pods))
	}
	for i := range pods {
		p := &pods[i]
		wantPodinfo(t, p)
		waitEvent(t, n, p.Name, reservation.RuntimeGuaranteed)
		if !strings.HasPrefix(p.Spec.NodeName, "g-work-") {
			t.Errorf("pod %s on %s", p.Name, p.Spec.NodeName)
		}
	}
}

func podSummary(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+":"+string(p.Status.Phase)+":"+p.Spec.NodeName+":"+p.Annotations[prefix+"booking-reference"])
	}
	return out
}

// kubectl describe of a waiting pod shows the scheduler's verdict beside
// the reservation event.
func TestDescribeShowsSchedulerAndReservation(t *testing.T) {
	n := env.Namespace(t)
	now := clk.Now()
	book(t, n, wsNoOD, "wait", 1, now.Add(25*time.Minute), now.Add(time.Hour))
	create(t, n, gpuPod("patient", "wait", 1, workspace(wsNoOD)))
	waitEvent(t, n, "patient", reservation.WaitingForReservation)
	var out []byte
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, waitFor, true, func(context.Context) (bool, error) {
		cmd := exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.Cluster.Kubeconfig(), "-n", n, "describe", "pod", "patient")
		var err error
		out, err = cmd.CombinedOutput()
		return err == nil && strings.Contains(string(out), "FailedScheduling") && strings.Contains(string(out), "WaitingForReservation"), nil
	})
	if err != nil {
		t.Fatalf("kubectl describe lacks FailedScheduling and the reservation event:\n%s", out)
	}
	for _, want := range []string{"untolerated taint", reservation.Component, "Waiting for your GPU reservation"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl describe lacks %q:\n%s", want, out)
		}
	}
}

// A second controller started on the same cluster (as after a restart or
// failover) rebuilds its state from it and admits nothing twice: no pod
// gets a second lease and no admission is repeated.
func TestRestartAdmitsNothingTwice(t *testing.T) {
	n := env.Namespace(t)
	var uids []string
	for _, name := range []string{"r1", "r2", "r3"} {
		uids = append(uids, string(create(t, n, gpuPod(name, "misc", 1)).UID))
	}
	for _, name := range []string{"r1", "r2", "r3"} {
		waitAdmitted(t, n, name, "misc")
	}
	before := map[string]string{}
	for _, name := range []string{"r1", "r2", "r3"} {
		p := getPod(t, n, name)
		before[name] = p.Annotations[prefix+"admitted-at"] + "|" + p.Annotations[prefix+"booking-reference"]
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	second, err := gpucontroller.New(env.Client, reservationstore.New(dyn, time.Minute), gpucontroller.Options{
		Config: engineConfig(), Namespace: ns, Name: "second-engine", Identity: "second", Tick: time.Second, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = second.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(ctx, poll, waitFor, true, func(context.Context) (bool, error) { return second.Leading(), nil }); err != nil {
		t.Fatal("second controller never started deciding")
	}
	step(2 * time.Second) // a few cycles of both engines
	time.Sleep(3 * time.Second)
	step(2 * time.Second)
	time.Sleep(2 * time.Second)
	for i, name := range []string{"r1", "r2", "r3"} {
		if l := leasesOf(uids[i]); len(l) != 1 {
			t.Errorf("pod %s has %d leases, want 1: %+v", name, len(l), l)
		}
		p := getPod(t, n, name)
		if got := p.Annotations[prefix+"admitted-at"] + "|" + p.Annotations[prefix+"booking-reference"]; got != before[name] {
			t.Errorf("pod %s admitted again: %s, was %s", name, got, before[name])
		}
	}
}
