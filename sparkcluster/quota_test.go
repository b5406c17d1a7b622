package sparkcluster

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func container(requests, limits corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func TestPodUsage(t *testing.T) {
	tests := map[string]struct {
		spec corev1.PodSpec
		want corev1.ResourceList
	}{
		"requests and limits summed over containers": {
			spec: corev1.PodSpec{Containers: []corev1.Container{
				container(rl("cpu", "500m", "memory", "1Gi"), rl("cpu", "1", "memory", "2Gi")),
				container(rl("cpu", "250m"), nil),
			}},
			want: rl("pods", "1", "count/pods", "1", "cpu", "750m", "requests.cpu", "750m", "memory", "1Gi", "requests.memory", "1Gi",
				"limits.cpu", "1", "limits.memory", "2Gi"),
		},
		"a limit alone is the request too": {
			spec: corev1.PodSpec{Containers: []corev1.Container{container(nil, rl("cpu", "2", "nvidia.com/gpu", "1"))}},
			want: rl("pods", "1", "count/pods", "1", "cpu", "2", "requests.cpu", "2", "limits.cpu", "2",
				"requests.nvidia.com/gpu", "1", "limits.nvidia.com/gpu", "1"),
		},
		"an init container counts at its maximum": {
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{container(rl("cpu", "3"), nil)},
				Containers:     []corev1.Container{container(rl("cpu", "1"), nil)},
			},
			want: rl("pods", "1", "count/pods", "1", "cpu", "3", "requests.cpu", "3"),
		},
		"best effort": {
			spec: corev1.PodSpec{Containers: []corev1.Container{container(nil, nil)}},
			want: rl("pods", "1", "count/pods", "1"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := podUsage(&tc.spec)
			if len(got) != len(tc.want) {
				t.Errorf("usage %v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				if g, ok := got[k]; !ok || g.Cmp(w) != 0 {
					t.Errorf("%s = %s, want %s", k, g.String(), w.String())
				}
			}
		})
	}
}

func quota(name string, hard, used corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes},
		Status:     corev1.ResourceQuotaStatus{Hard: hard, Used: used},
	}
}

func TestShortfalls(t *testing.T) {
	notebook := &corev1.PodSpec{Containers: []corev1.Container{container(rl("cpu", "500m"), rl("cpu", "1"))}}
	worker := &corev1.PodSpec{Containers: []corev1.Container{container(rl("cpu", "1", "memory", "2Gi"), rl("cpu", "1", "memory", "2Gi"))}}
	d := demand{
		pods:    []demandPart{{what: "notebook", spec: notebook, count: 1}, {what: "Spark workers", spec: worker, count: 2}},
		objects: rl("count/deployments.apps", "2", "services", "1"),
	}
	type short struct {
		quota, resource, need, free string
	}
	tests := map[string]struct {
		quotas []*corev1.ResourceQuota
		want   []short
	}{
		"fits": {quotas: []*corev1.ResourceQuota{quota("q", rl("requests.cpu", "4"), rl("requests.cpu", "1"))}},
		"cpu short, with what needs it": {
			quotas: []*corev1.ResourceQuota{quota("q", rl("requests.cpu", "4", "limits.cpu", "10"), rl("requests.cpu", "2", "limits.cpu", "0"))},
			want:   []short{{"q", "requests.cpu", "2500m", "2"}},
		},
		"object counts, unscoped only": {
			quotas: []*corev1.ResourceQuota{
				quota("objects", rl("count/deployments.apps", "3", "services", "5"), rl("count/deployments.apps", "2", "services", "0")),
				quota("scoped", rl("count/deployments.apps", "0"), rl("count/deployments.apps", "0"), corev1.ResourceQuotaScopeNotBestEffort),
			},
			want: []short{{"objects", "count/deployments.apps", "2", "1"}},
		},
		"a scope picks the pods it covers": {
			quotas: []*corev1.ResourceQuota{quota("be", rl("pods", "0"), rl("pods", "0"), corev1.ResourceQuotaScopeBestEffort),
				quota("nbe", rl("pods", "3"), rl("pods", "1"), corev1.ResourceQuotaScopeNotBestEffort)},
			want: []short{{"nbe", "pods", "3", "2"}},
		},
		"usage not recorded yet is skipped": {
			quotas: []*corev1.ResourceQuota{quota("q", rl("requests.cpu", "1"), nil)},
		},
		"an unknown scope skips the quota": {
			quotas: []*corev1.ResourceQuota{quota("q", rl("pods", "0"), rl("pods", "0"), "CrossNamespacePodAffinity")},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []short
			for _, s := range shortfalls(tc.quotas, d) {
				got = append(got, short{s.quota.Name, string(s.resource), s.need.String(), s.free.String()})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("shortfalls %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestExplainShortfall(t *testing.T) {
	q := quota("allowance", rl("requests.cpu", "4"), rl("requests.cpu", "3500m"))
	notebook := &corev1.PodSpec{Containers: []corev1.Container{container(rl("cpu", "500m"), nil)}}
	worker := &corev1.PodSpec{Containers: []corev1.Container{container(rl("cpu", "1"), nil)}}
	s := shortfalls([]*corev1.ResourceQuota{q}, demand{pods: []demandPart{{what: "notebook", spec: notebook, count: 1}, {what: "Spark workers", spec: worker, count: 2}}})
	if len(s) != 1 {
		t.Fatalf("shortfalls %+v, want one", s)
	}
	pod := func(name string, cpu string, phase corev1.PodPhase, ann map[string]string, labels map[string]string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{container(rl("cpu", cpu), nil)}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	pods := []corev1.Pod{
		pod("redis", "500m", corev1.PodRunning, nil, nil),
		pod("postgres-0", "2", corev1.PodRunning, nil, nil),
		pod("jupyter-bob", "1", corev1.PodRunning, map[string]string{"spawner.dsmlp.io/user": "bob", "spawner.dsmlp.io/server-name": "x"}, nil),
		pod("done", "8", corev1.PodSucceeded, nil, nil),
		pod("spark-worker-1", "1", corev1.PodPending, map[string]string{"spawner.dsmlp.io/user": "bob"}, map[string]string{"component": "spark-worker"}),
	}
	got := explain(s[0], "ns", pods)
	want := "not enough requests.cpu in namespace ns (ResourceQuota allowance): the server and its Spark cluster need 2.5 " +
		"(notebook 0.5, 2 Spark workers 2), but only 0.5 of 4 is free; already using it: pod postgres-0 2, " +
		"pod jupyter-bob (notebook of bob/x) 1, pod spark-worker-1 (Spark worker of bob) 1, pod redis 0.5"
	if got != want {
		t.Errorf("explain:\n got %s\nwant %s", got, want)
	}
	var many []corev1.Pod
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		many = append(many, pod(n, "100m", corev1.PodRunning, nil, nil))
	}
	if got := explain(s[0], "ns", many); !strings.HasSuffix(got, "pod e 0.1, and 2 more") {
		t.Errorf("a long list is not cut: %s", got)
	}
}

func TestParseQuotaRefusal(t *testing.T) {
	msg := `pods "spark-worker-5d9f-abcde" is forbidden: exceeded quota: allowance, requested: limits.cpu=1,requests.cpu=1, used: limits.cpu=4,requests.cpu=3500m, limited: limits.cpu=4,requests.cpu=4`
	name, res, ok := parseQuotaRefusal(msg)
	if !ok || name != "allowance" || !reflect.DeepEqual(res, []corev1.ResourceName{"limits.cpu", "requests.cpu"}) {
		t.Errorf("parseQuotaRefusal = %q %v %v", name, res, ok)
	}
	if _, _, ok := parseQuotaRefusal(`pods "x" is forbidden: violates PodSecurity`); ok {
		t.Error("a refusal that is not a quota's parsed as one")
	}
}

func TestFormatQuantity(t *testing.T) {
	for _, tc := range []struct {
		name corev1.ResourceName
		q    string
		want string
	}{
		{"requests.cpu", "2500m", "2.5"},
		{"limits.cpu", "4", "4"},
		{"requests.memory", "2147483648", "2Gi"},
		{"memory", "1536Mi", "1536Mi"},
		{"pods", "3", "3"},
	} {
		if got := formatQuantity(tc.name, resource.MustParse(tc.q)); got != tc.want {
			t.Errorf("formatQuantity(%s, %s) = %s, want %s", tc.name, tc.q, got, tc.want)
		}
	}
}
