package devcluster

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDefaultNodeConfig(t *testing.T) {
	nodes := DefaultNodeConfig().Nodes()
	classes := map[string]int{}
	for _, n := range nodes {
		if n.Labels[kwokNodeLabel] != kwokNodeValue {
			t.Errorf("node %s is not kwok-managed", n.Name)
		}
		if c := n.Labels[LabelGPUClass]; c != "" {
			gpus := n.Status.Capacity[ResourceGPU]
			classes[c] += int(gpus.Value())
			if want := (corev1.Taint{Key: ReservationTaintKey, Value: c, Effect: corev1.TaintEffectNoSchedule}); !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return want.MatchTaint(&t) && t.Value == want.Value }) {
				t.Errorf("GPU node %s lacks the class taint %s; has %v", n.Name, want.ToString(), n.Spec.Taints)
			}
		} else if len(n.Spec.Taints) > 0 {
			t.Errorf("CPU node %s is tainted: %v", n.Name, n.Spec.Taints)
		}
	}
	if len(classes) < 2 {
		t.Errorf("want GPU nodes of at least two classes, got %v", classes)
	}
	off := false
	cfg := &NodeConfig{NodeSets: []NodeSet{{Name: "g", Count: 1, CPU: "1", Memory: "1Gi", GPUs: 1, GPUClass: "x"}}, ReservationTaint: &off}
	if n := cfg.Nodes()[0]; len(n.Spec.Taints) != 0 {
		t.Errorf("reservationTaint: false still taints: %v", n.Spec.Taints)
	}
}

func TestParseNodeConfigErrors(t *testing.T) {
	cases := map[string]string{
		"unknown key":         "nodeSets:\n- name: a\n  count: 1\n  cpu: '1'\n  memory: 1Gi\n  colour: red\n",
		"bad name":            "nodeSets:\n- name: A_B\n  count: 1\n  cpu: '1'\n  memory: 1Gi\n",
		"duplicate":           "nodeSets:\n- {name: a, count: 1, cpu: '1', memory: 1Gi}\n- {name: a, count: 1, cpu: '1', memory: 1Gi}\n",
		"bad cpu":             "nodeSets:\n- {name: a, count: 1, cpu: lots, memory: 1Gi}\n",
		"gpus without class":  "nodeSets:\n- {name: a, count: 1, cpu: '1', memory: 1Gi, gpus: 2}\n",
		"negative count":      "nodeSets:\n- {name: a, count: -1, cpu: '1', memory: 1Gi}\n",
		"local gpus no class": "localRuntimeGPUs: 2\n",
	}
	want := map[string]string{
		"unknown key": "colour", "bad name": "nodeSets[0].name", "duplicate": "nodeSets[1].name",
		"bad cpu": "nodeSets[0].cpu", "gpus without class": "nodeSets[0].gpuClass",
		"negative count": "nodeSets[0].count", "local gpus no class": "localRuntimeGPUClass",
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseNodeConfig([]byte(data))
			if err == nil || !strings.Contains(err.Error(), want[name]) {
				t.Errorf("error %v, want one naming %q", err, want[name])
			}
		})
	}
}

func TestNodeSetExpands(t *testing.T) {
	cfg, err := ParseNodeConfig([]byte("nodeSets:\n- {name: big, count: 500, cpu: '64', memory: 256Gi, gpus: 8, gpuClass: h100}\nlocalRuntime: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := cfg.Nodes()
	if len(nodes) != 500 || nodes[499].Name != "big-499" || nodes[0].Labels[LabelGPUClass] != "h100" {
		t.Fatalf("got %d nodes, last %s", len(nodes), nodes[len(nodes)-1].Name)
	}
	if cfg.localRuntime() {
		t.Error("localRuntime: false ignored")
	}
}
