package reservation

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// placement is a pod's node constraint: its nodeSelector and required node
// affinity. The class's own node selection (added by the admission
// webhook) is told apart so messages quote only what the pod chose.
type placement struct {
	selector map[string]string
	own      map[string]string // selector entries the class did not add
	affinity *corev1.NodeSelector
}

func placementOf(pod *corev1.Pod, cls *GPUClass) placement {
	pl := placement{selector: pod.Spec.NodeSelector}
	for k, v := range pod.Spec.NodeSelector {
		if cls == nil || cls.NodeSelector[k] != v {
			if pl.own == nil {
				pl.own = map[string]string{}
			}
			pl.own[k] = v
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		pl.affinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return pl
}

// hasOwn reports whether the pod constrains its nodes beyond its class.
func (pl placement) hasOwn() bool { return len(pl.own) > 0 || pl.affinity != nil }

// allows reports whether the pod may run on n.
func (pl placement) allows(n *corev1.Node) bool {
	return selectorMatches(pl.selector, n) && affinityMatches(pl.affinity, n)
}

// allowsOwn is allows without the class's node selection: would the pod's
// own constraint let it run on n?
func (pl placement) allowsOwn(n *corev1.Node) bool {
	return selectorMatches(pl.own, n) && affinityMatches(pl.affinity, n)
}

// describe quotes the pod's own constraint for a message.
func (pl placement) describe() string {
	sel := pl.own
	if len(sel) == 0 {
		sel = pl.selector
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	s := strconv.Quote(clean(strings.Join(parts, ",")))
	if len(parts) == 0 {
		s = "(none)"
	}
	if pl.affinity != nil {
		s += " with its required node affinity"
	}
	return s
}

func selectorMatches(sel map[string]string, n *corev1.Node) bool {
	for k, v := range sel {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// affinityMatches follows the scheduler's rule: terms are ORed, the
// requirements of a term ANDed, and an empty term matches nothing. A
// requirement this code cannot evaluate counts as not matching, so the pod
// is reported rather than leased for nodes it may never get.
func affinityMatches(ns *corev1.NodeSelector, n *corev1.Node) bool {
	if ns == nil {
		return true
	}
	for _, term := range ns.NodeSelectorTerms {
		if termMatches(term, n) {
			return true
		}
	}
	return false
}

func termMatches(term corev1.NodeSelectorTerm, n *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	for _, r := range term.MatchExpressions {
		v, ok := n.Labels[r.Key]
		if !requirementMatches(r, v, ok) {
			return false
		}
	}
	for _, r := range term.MatchFields {
		if r.Key != "metadata.name" || !requirementMatches(r, n.Name, true) {
			return false
		}
	}
	return true
}

func requirementMatches(r corev1.NodeSelectorRequirement, v string, ok bool) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return have > want
		}
		return have < want
	}
	return false
}

// nodeState is one node as this cycle sees it.
type nodeState struct {
	node    *corev1.Node
	class   string // from the reservation taint; "" for other nodes
	gpus    int    // allocatable
	used    int    // GPUs of live pods bound to it
	counted bool   // schedulable, Ready, tainted: its GPUs count for the class
}

func (n *nodeState) free() int { return n.gpus - n.used }

// newNodeState reads a node: its class is the value of the reservation
// taint, its GPUs the nvidia.com/gpu allocatable (or the class default).
func newNodeState(n *corev1.Node, taintKey string, classes map[string]*GPUClass) *nodeState {
	ns := &nodeState{node: n}
	for _, t := range n.Spec.Taints {
		if t.Key == taintKey && t.Effect == corev1.TaintEffectNoSchedule {
			ns.class = t.Value
			break
		}
	}
	cls := classes[ns.class]
	if cls == nil {
		ns.class = ""
		return ns
	}
	if q, ok := n.Status.Allocatable[GPUResource]; ok {
		ns.gpus = int(q.Value())
	} else {
		ns.gpus = cls.GPUsPerNode
	}
	ns.counted = !n.Spec.Unschedulable && nodeReady(n)
	return ns
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodGPUs is the pod's effective nvidia.com/gpu request, as the scheduler
// computes it: the larger of the largest init container and the sum of the
// app containers, each container's limit or else its request.
func PodGPUs(pod *corev1.Pod) int {
	one := func(c *corev1.Container) int64 {
		if q, ok := c.Resources.Limits[GPUResource]; ok {
			return q.Value()
		}
		if q, ok := c.Resources.Requests[GPUResource]; ok {
			return q.Value()
		}
		return 0
	}
	var sum, initMax int64
	for i := range pod.Spec.Containers {
		sum += one(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		initMax = max(initMax, one(&pod.Spec.InitContainers[i]))
	}
	return int(max(sum, initMax))
}
