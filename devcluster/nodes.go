package devcluster

import (
	_ "embed"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const (
	// LocalRuntimeNode is the node whose pods really run as local processes.
	LocalRuntimeNode = "local-runtime"
	// LocalRuntimeGPUNode is the second local-runtime node, with simulated
	// GPUs (localRuntimeGPUs). It is a node of its own so that the GPU class
	// taint it carries never keeps CPU pods off the plain local-runtime node.
	LocalRuntimeGPUNode = "local-runtime-gpu"
	// LocalRuntimeTaint keeps ordinary pods off the local-runtime node; pods
	// meant to run for real tolerate it and select the node by LabelLocalRuntime.
	LocalRuntimeTaint = "devcluster.dsmlp.io/local-runtime"
	// LabelLocalRuntime marks the local-runtime node ("true").
	LabelLocalRuntime = "devcluster.dsmlp.io/local-runtime"
	// ReservationTaintKey is the GPU reservation engine's class taint:
	// GPU nodes carry <key>=<class>:NoSchedule, so only pods the engine
	// admitted (given the toleration) land on them.
	ReservationTaintKey = "gpu-class-reservation"
	// LabelGPUClass is the node label naming a GPU class.
	LabelGPUClass = "gpu-class"
	// ResourceGPU is the extended resource GPU nodes advertise.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

	kwokNodeLabel = "type"
	kwokNodeValue = "kwok"
)

//go:embed nodes.yaml
var defaultNodesYAML []byte

// NodeConfig is the node-set file: which fake nodes the cluster gets.
type NodeConfig struct {
	// NodeSets are groups of identical kwok-managed nodes.
	NodeSets []NodeSet `json:"nodeSets"`
	// LocalRuntime adds the node whose pods run as local processes. Default true.
	LocalRuntime *bool `json:"localRuntime,omitempty"`
	// LocalRuntimeGPUs and LocalRuntimeGPUClass add a second local-runtime
	// node, LocalRuntimeGPUNode, with that many simulated GPUs of that class
	// (and the class taint), so that a GPU profile can reach a real notebook
	// while CPU pods keep the untainted local-runtime node.
	LocalRuntimeGPUs     int    `json:"localRuntimeGPUs,omitempty"`
	LocalRuntimeGPUClass string `json:"localRuntimeGPUClass,omitempty"`
	// ReservationTaint puts the reservation engine's class taint on every
	// GPU node (the local-runtime one included). Default true.
	ReservationTaint *bool `json:"reservationTaint,omitempty"`
}

// reservationTaints is the class taint for a GPU node of class, if enabled.
func (c *NodeConfig) reservationTaints(class string) []corev1.Taint {
	if c.ReservationTaint != nil && !*c.ReservationTaint {
		return nil
	}
	return []corev1.Taint{{Key: ReservationTaintKey, Value: class, Effect: corev1.TaintEffectNoSchedule}}
}

// NodeSet describes Count identical nodes named <Name>-<i>.
type NodeSet struct {
	Name   string `json:"name"`
	Count  int    `json:"count"`
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	// Pods is the pod capacity per node. Default 110.
	Pods int `json:"pods,omitempty"`
	// GPUs is the nvidia.com/gpu capacity per node; GPUClass labels the node gpu-class=<class>.
	GPUs     int               `json:"gpus,omitempty"`
	GPUClass string            `json:"gpuClass,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Taints   []corev1.Taint    `json:"taints,omitempty"`
}

// DefaultNodeConfig returns the built-in node sets: CPU nodes and GPU nodes of two classes.
func DefaultNodeConfig() *NodeConfig {
	cfg, err := ParseNodeConfig(defaultNodesYAML)
	if err != nil {
		panic(fmt.Sprintf("embedded nodes.yaml is invalid: %v", err)) // a build defect, caught by tests
	}
	return cfg
}

// LoadNodeConfig reads a node-set file.
func LoadNodeConfig(path string) (*NodeConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading node config: %w", err)
	}
	cfg, err := ParseNodeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("node config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseNodeConfig decodes and checks a node-set file; unknown keys are errors.
func ParseNodeConfig(data []byte) (*NodeConfig, error) {
	var cfg NodeConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	seen := map[string]bool{}
	for i, ns := range cfg.NodeSets {
		path := fmt.Sprintf("nodeSets[%d]", i)
		if errs := validation.IsDNS1123Label(ns.Name); len(errs) > 0 {
			return nil, fmt.Errorf("%s.name: %q: %v", path, ns.Name, errs)
		}
		if seen[ns.Name] {
			return nil, fmt.Errorf("%s.name: %q is used twice", path, ns.Name)
		}
		seen[ns.Name] = true
		if ns.Count < 0 {
			return nil, fmt.Errorf("%s.count: must not be negative", path)
		}
		for field, q := range map[string]string{"cpu": ns.CPU, "memory": ns.Memory} {
			if _, err := resource.ParseQuantity(q); err != nil {
				return nil, fmt.Errorf("%s.%s: %q: %w", path, field, q, err)
			}
		}
		if ns.GPUs < 0 {
			return nil, fmt.Errorf("%s.gpus: must not be negative", path)
		}
		if ns.GPUs > 0 && ns.GPUClass == "" {
			return nil, fmt.Errorf("%s.gpuClass: required when gpus is set", path)
		}
	}
	if cfg.LocalRuntimeGPUs > 0 && cfg.LocalRuntimeGPUClass == "" {
		return nil, fmt.Errorf("localRuntimeGPUClass: required when localRuntimeGPUs is set")
	}
	return &cfg, nil
}

func (c *NodeConfig) localRuntime() bool { return c.LocalRuntime == nil || *c.LocalRuntime }

// Nodes returns the Node objects of every kwok-managed node set.
func (c *NodeConfig) Nodes() []*corev1.Node {
	var out []*corev1.Node
	for _, ns := range c.NodeSets {
		pods := ns.Pods
		if pods == 0 {
			pods = 110
		}
		for i := 0; i < ns.Count; i++ {
			labels := map[string]string{
				kwokNodeLabel:             kwokNodeValue,
				"kubernetes.io/os":        "linux",
				"kubernetes.io/arch":      "amd64",
				"kubernetes.io/hostname":  fmt.Sprintf("%s-%d", ns.Name, i),
				"devcluster.dsmlp.io/set": ns.Name,
			}
			for k, v := range ns.Labels {
				labels[k] = v
			}
			capacity := corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(ns.CPU),
				corev1.ResourceMemory: resource.MustParse(ns.Memory),
				corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
			}
			taints := append([]corev1.Taint(nil), ns.Taints...)
			if ns.GPUs > 0 {
				taints = append(taints, c.reservationTaints(ns.GPUClass)...)
				labels[LabelGPUClass] = ns.GPUClass
				capacity[ResourceGPU] = *resource.NewQuantity(int64(ns.GPUs), resource.DecimalSI)
			}
			out = append(out, &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{
					Name:        fmt.Sprintf("%s-%d", ns.Name, i),
					Labels:      labels,
					Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
				},
				Spec:   corev1.NodeSpec{Taints: taints},
				Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
			})
		}
	}
	return out
}
