package reservation_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/dsmlp/spawner/admission"
	"github.com/dsmlp/spawner/devcluster"
	"github.com/dsmlp/spawner/e2e/harness"
	"github.com/dsmlp/spawner/reservation"
)

// chartWebhook renders the chart's MutatingWebhookConfiguration, so the
// suite's webhook has the chart's rules, object selector and timeout.
func chartWebhook(e *harness.Env) (*admissionregv1.MutatingWebhookConfiguration, error) {
	out, err := exec.Command(filepath.Join(e.BinDir, "helm"), "template", "spawnerd", filepath.Join(e.RepoDir, "deploy/helm/spawnerd"),
		"--namespace", ns, "--show-only", "templates/reservation.yaml", "--set", "reservation.enabled=true").Output()
	if err != nil {
		return nil, fmt.Errorf("rendering the chart's webhook: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var whc admissionregv1.MutatingWebhookConfiguration
		if err := dec.Decode(&whc); err != nil {
			return nil, fmt.Errorf("no MutatingWebhookConfiguration in the chart's reservation.yaml: %w", err)
		}
		if whc.Kind == "MutatingWebhookConfiguration" {
			return &whc, nil
		}
	}
}

func cpuJob(name string) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
}

func hasPodinfo(spec corev1.PodSpec) bool {
	for _, v := range spec.Volumes {
		if v.Name == admission.VolumeName {
			return true
		}
	}
	return false
}

// Jobs created while no webhook existed (a CPU Job, and a GPU Job labelled
// with its class) update cleanly once the webhook is installed: the webhook
// never patches a template on UPDATE (a Job's spec.template is immutable).
// A CPU pod created with the webhook in place is not touched; a GPU pod
// still gets its class node selection and /etc/podinfo.
func TestWebhookScope(t *testing.T) {
	n := env.Namespace(t)
	ctx := context.Background()
	whcs := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	installed, err := whcs.Get(ctx, "spawnerd-gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reinstall := func() {
		again := installed.DeepCopy()
		again.ResourceVersion, again.UID = "", ""
		if _, err := whcs.Create(ctx, again, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("reinstalling the webhook: %v", err)
		}
	}
	// Before the webhook existed.
	if err := whcs.Delete(ctx, installed.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reinstall)
	jobs := env.Client.BatchV1().Jobs(n)
	if _, err := jobs.Create(ctx, cpuJob("cpu-old"), metav1.CreateOptions{}); err != nil {
		reinstall()
		t.Fatal(err)
	}
	gpuJob := cpuJob("gpu-old")
	gpuJob.Labels = map[string]string{reservation.ClassLabel: "work"}
	gpuJob.Spec.Template = gpuTemplate("work")
	gpuJob.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := jobs.Create(ctx, gpuJob, metav1.CreateOptions{}); err != nil {
		reinstall()
		t.Fatal(err)
	}
	reinstall()

	// The API server reads webhook configurations from an informer: wait
	// until the webhook mutates a (dry-run) GPU pod again.
	probe := gpuPod("probe", "work", 1)
	err = wait.PollUntilContextTimeout(ctx, poll, waitFor, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(n).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && hasPodinfo(p.Spec), nil
	})
	if err != nil {
		t.Fatal("the reinstalled webhook never mutated a GPU pod")
	}

	// After: an update of each goes through, its template untouched.
	// The job controller writes the job's status meanwhile, so an update
	// can meet a newer resourceVersion: read again and retry on conflict.
	for _, name := range []string{"cpu-old", "gpu-old"} {
		var j *batchv1.Job
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := jobs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels["touched"] = "yes"
			j, err = jobs.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("updating job %s created before the webhook: %v", name, err)
		}
		if hasPodinfo(j.Spec.Template.Spec) {
			t.Errorf("job %s: template mutated on UPDATE", name)
		}
	}

	// A CPU pod is not touched.
	cpu, err := env.Client.CoreV1().Pods(n).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cpu"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hasPodinfo(cpu.Spec) || len(cpu.Spec.NodeSelector) != 0 {
		t.Errorf("CPU pod mutated: volumes %v, node selector %v", cpu.Spec.Volumes, cpu.Spec.NodeSelector)
	}
	// A GPU pod gets the class node selection and /etc/podinfo.
	gpu := create(t, n, gpuPod("gpu", "work", 1))
	if gpu.Spec.NodeSelector[devcluster.LabelGPUClass] != "work" || !hasPodinfo(gpu.Spec) {
		t.Errorf("GPU pod not mutated: volumes %v, node selector %v", gpu.Spec.Volumes, gpu.Spec.NodeSelector)
	}
	for _, c := range gpu.Spec.Containers {
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.MountPath == admission.Mount
		}
		if !mounted {
			t.Errorf("GPU pod container %s has no %s mount", c.Name, admission.Mount)
		}
	}
}
