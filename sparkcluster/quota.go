package sparkcluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/dsmlp/spawner/poll"
	"github.com/dsmlp/spawner/spawner"
)

// demandPart is one kind of pod a spawn creates, count times.
type demandPart struct {
	what  string // "notebook", "Spark master", "Spark workers"
	spec  *corev1.PodSpec
	count int64
}

// demand is everything a spawn with a Spark cluster adds to its
// namespace's quota: pods, and the objects that object-count quotas cover.
type demand struct {
	pods    []demandPart
	objects corev1.ResourceList // count/* and the legacy names, unscoped quotas only
}

// sparkDemand is the demand of a notebook pod with its Spark cluster and,
// with services_enabled, the notebook's own Service.
func sparkDemand(pod *corev1.Pod, c *spawner.SparkCluster, notebookService bool) demand {
	services := int64(1)
	if notebookService {
		services++
	}
	objects := corev1.ResourceList{}
	for name, n := range map[corev1.ResourceName]int64{
		corev1.ResourceServices: services, "count/services": services,
		corev1.ResourceConfigMaps: 1, "count/configmaps": 1,
		"count/deployments.apps": 2, "count/replicasets.apps": 2,
	} {
		objects[name] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return demand{
		pods: []demandPart{
			{what: "notebook", spec: &pod.Spec, count: 1},
			{what: "Spark master", spec: &c.Master.Spec.Template.Spec, count: 1},
			{what: "Spark workers", spec: &c.Worker.Spec.Template.Spec, count: int64(c.Workers)},
		},
		objects: objects,
	}
}

// podUsage is what one pod counts against a quota, as the API server's pod
// evaluator reckons it: requests (a limit alone is also the request) and
// limits summed over containers, init containers taken at their maximum,
// under both the requests.* and the bare names, and the pod itself.
func podUsage(spec *corev1.PodSpec) corev1.ResourceList {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	sum := func(dst corev1.ResourceList, src corev1.ResourceList) {
		for k, v := range src {
			q := dst[k]
			q.Add(v)
			dst[k] = q
		}
	}
	maxInto := func(dst corev1.ResourceList, src corev1.ResourceList) {
		for k, v := range src {
			if q, ok := dst[k]; !ok || v.Cmp(q) > 0 {
				dst[k] = v.DeepCopy()
			}
		}
	}
	effective := func(c corev1.Container) (corev1.ResourceList, corev1.ResourceList) {
		req := c.Resources.Requests.DeepCopy()
		if req == nil {
			req = corev1.ResourceList{}
		}
		for k, v := range c.Resources.Limits {
			if _, ok := req[k]; !ok {
				req[k] = v.DeepCopy()
			}
		}
		return req, c.Resources.Limits
	}
	for _, c := range spec.Containers {
		r, l := effective(c)
		sum(requests, r)
		sum(limits, l)
	}
	for _, c := range spec.InitContainers {
		r, l := effective(c)
		maxInto(requests, r)
		maxInto(limits, l)
	}
	out := corev1.ResourceList{
		corev1.ResourcePods: *resource.NewQuantity(1, resource.DecimalSI),
		"count/pods":        *resource.NewQuantity(1, resource.DecimalSI),
	}
	for k, v := range requests {
		out[corev1.ResourceName("requests."+string(k))] = v
		if k == corev1.ResourceCPU || k == corev1.ResourceMemory || k == corev1.ResourceEphemeralStorage {
			out[k] = v
		}
	}
	for k, v := range limits {
		out[corev1.ResourceName("limits."+string(k))] = v
	}
	return out
}

// scopesMatch reports whether a quota's scopes cover a pod, and whether the
// scopes are understood at all (an unknown scope makes the check skip the
// quota; the API server still enforces it).
func scopesMatch(q *corev1.ResourceQuota, spec *corev1.PodSpec) (match, known bool) {
	bestEffort := true
	for _, c := range append(append([]corev1.Container(nil), spec.Containers...), spec.InitContainers...) {
		if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 {
			bestEffort = false
		}
	}
	terminating := spec.ActiveDeadlineSeconds != nil
	scope := func(s corev1.ResourceQuotaScope) (bool, bool) {
		switch s {
		case corev1.ResourceQuotaScopeBestEffort:
			return bestEffort, true
		case corev1.ResourceQuotaScopeNotBestEffort:
			return !bestEffort, true
		case corev1.ResourceQuotaScopeTerminating:
			return terminating, true
		case corev1.ResourceQuotaScopeNotTerminating:
			return !terminating, true
		}
		return false, false
	}
	match = true
	for _, s := range q.Spec.Scopes {
		m, k := scope(s)
		if !k {
			return false, false
		}
		match = match && m
	}
	if q.Spec.ScopeSelector != nil {
		for _, e := range q.Spec.ScopeSelector.MatchExpressions {
			if e.ScopeName != corev1.ResourceQuotaScopePriorityClass {
				m, k := scope(e.ScopeName)
				if !k {
					return false, false
				}
				match = match && m == (e.Operator != corev1.ScopeSelectorOpDoesNotExist)
				continue
			}
			has := spec.PriorityClassName != ""
			in := false
			for _, v := range e.Values {
				in = in || v == spec.PriorityClassName
			}
			switch selection.Operator(e.Operator) {
			case selection.In:
				match = match && has && in
			case selection.NotIn:
				match = match && has && !in
			case selection.Exists:
				match = match && has
			case selection.DoesNotExist:
				match = match && !has
			default:
				return false, false
			}
		}
	}
	return match, true
}

func scoped(q *corev1.ResourceQuota) bool {
	return len(q.Spec.Scopes) > 0 || q.Spec.ScopeSelector != nil
}

// shortfall is one resource a quota cannot give a spawn.
type shortfall struct {
	quota      *corev1.ResourceQuota
	resource   corev1.ResourceName
	need, free resource.Quantity
	parts      []string // what the spawn needs it for
}

// shortfalls compares a demand with the quotas' hard limits less what they
// record as used, as the API server's quota admission would. A resource
// whose usage the quota controller has not recorded yet is skipped.
func shortfalls(quotas []*corev1.ResourceQuota, d demand) []shortfall {
	var out []shortfall
	for _, q := range quotas {
		needs := map[corev1.ResourceName]*resource.Quantity{}
		parts := map[corev1.ResourceName][]string{}
		for _, part := range d.pods {
			if match, known := scopesMatch(q, part.spec); !match || !known {
				continue
			}
			for name, per := range podUsage(part.spec) {
				total := per.DeepCopy()
				total.Mul(part.count)
				if needs[name] == nil {
					needs[name] = &resource.Quantity{Format: per.Format}
				}
				needs[name].Add(total)
				label := part.what
				if part.count != 1 {
					label = fmt.Sprintf("%d %s", part.count, part.what)
				}
				parts[name] = append(parts[name], label+" "+formatQuantity(name, total))
			}
		}
		if !scoped(q) {
			for name, n := range d.objects {
				n := n.DeepCopy()
				needs[name] = &n
			}
		}
		for _, name := range sortedResourceNames(q.Spec.Hard) {
			need, ok := needs[name]
			used, recorded := q.Status.Used[name]
			if !ok || !recorded {
				continue
			}
			free := q.Spec.Hard[name].DeepCopy()
			free.Sub(used)
			if need.Cmp(free) > 0 {
				out = append(out, shortfall{quota: q, resource: name, need: *need, free: free, parts: parts[name]})
			}
		}
	}
	return out
}

func sortedResourceNames(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// formatQuantity writes CPU in cores ("1.5"), memory and storage in binary
// units ("2Gi"), and counts as numbers.
func formatQuantity(name corev1.ResourceName, q resource.Quantity) string {
	n := string(name)
	switch {
	case strings.HasSuffix(n, "cpu"):
		return strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', -1, 64)
	case strings.HasSuffix(n, "memory") || strings.HasSuffix(n, "storage"):
		return resource.NewQuantity(q.Value(), resource.BinarySI).String()
	}
	return q.String()
}

// user is one pod's share of a resource, for the "already using it" list.
type user struct {
	name   string
	amount resource.Quantity
}

// usersOf lists the pods of the namespace that count against the quota's
// resource, largest first. Pods that have ended do not count.
func usersOf(pods []corev1.Pod, q *corev1.ResourceQuota, name corev1.ResourceName) []user {
	var out []user
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if match, known := scopesMatch(q, &p.Spec); !match || !known {
			continue
		}
		if v, ok := podUsage(&p.Spec)[name]; ok && !v.IsZero() {
			out = append(out, user{name: describePodUse(p), amount: v})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if c := out[i].amount.Cmp(out[j].amount); c != 0 {
			return c > 0
		}
		return out[i].name < out[j].name
	})
	return out
}

// describePodUse names a pod for a user: what spawnerd made it for, or
// that something else (a manifest, typically) did.
func describePodUse(p *corev1.Pod) string {
	owner := p.Annotations[poll.AnnotationUser]
	if server := p.Annotations[poll.AnnotationServerName]; server != "" {
		owner += "/" + server
	}
	switch p.Labels[spawner.LabelComponent] {
	case spawner.SparkMasterComponent:
		return fmt.Sprintf("pod %s (Spark master of %s)", p.Name, owner)
	case spawner.SparkWorkerComponent:
		return fmt.Sprintf("pod %s (Spark worker of %s)", p.Name, owner)
	}
	if owner != "" {
		return fmt.Sprintf("pod %s (notebook of %s)", p.Name, owner)
	}
	return "pod " + p.Name
}

// maxUsersListed bounds the "already using it" list.
const maxUsersListed = 5

// explain writes one shortfall as a sentence for the user: which resource,
// what the spawn needs, what is free, and what already uses it.
func explain(s shortfall, namespace string, pods []corev1.Pod) string {
	hard := s.quota.Spec.Hard[s.resource]
	msg := fmt.Sprintf("not enough %s in namespace %s (ResourceQuota %s): the server and its Spark cluster need %s (%s), but only %s of %s is free",
		s.resource, namespace, s.quota.Name, formatQuantity(s.resource, s.need), strings.Join(s.parts, ", "),
		formatQuantity(s.resource, s.free), formatQuantity(s.resource, hard))
	if isObjectCount(s.resource) {
		return msg
	}
	if users := usersOf(pods, s.quota, s.resource); len(users) > 0 {
		msg += "; already using it: " + listUsers(users, s.resource)
	}
	return msg
}

// listUsers writes the largest users of a resource, maxUsersListed at most.
func listUsers(users []user, name corev1.ResourceName) string {
	var list []string
	for i, u := range users {
		if i == maxUsersListed {
			list = append(list, fmt.Sprintf("and %d more", len(users)-maxUsersListed))
			break
		}
		list = append(list, u.name+" "+formatQuantity(name, u.amount))
	}
	return strings.Join(list, ", ")
}

func isObjectCount(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceServices, corev1.ResourceConfigMaps, corev1.ResourceSecrets, corev1.ResourcePersistentVolumeClaims:
		return true
	}
	return strings.HasPrefix(string(name), "count/") && name != "count/pods"
}

// checkFits refuses, before anything is created, a spawn whose
// notebook and Spark cluster do not fit the namespace's quotas. Only a
// refusal reads the API server: it lists the namespace's pods to say what
// already uses the resource, and to let through a spawn that is refused
// only because the quota's recorded usage still counts pods that are gone.
func (r *Reconciler) checkFits(ctx context.Context, objs *spawner.Objects, c *spawner.SparkCluster) error {
	short := shortfalls(r.cache.quotas(c.Namespace), sparkDemand(objs.Pod, c, objs.Service != nil))
	if len(short) == 0 {
		return nil
	}
	list, err := r.client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the pods of %s: %w", c.Namespace, err)
	}
	var msgs []string
	for _, s := range short {
		if !isObjectCount(s.resource) {
			live := resource.Quantity{}
			for _, u := range usersOf(list.Items, s.quota, s.resource) {
				live.Add(u.amount)
			}
			live.Add(s.need)
			if live.Cmp(s.quota.Spec.Hard[s.resource]) <= 0 {
				continue // the quota controller has not caught up with a deletion
			}
		}
		msgs = append(msgs, explain(s, c.Namespace, list.Items))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrQuota, strings.Join(msgs, "; "))
}

// parseQuotaRefusal reads the API server's quota admission message,
// "exceeded quota: NAME, requested: r=v,..., used: ..., limited: ...".
func parseQuotaRefusal(msg string) (quota string, resources []corev1.ResourceName, ok bool) {
	_, rest, found := strings.Cut(msg, "exceeded quota: ")
	if !found {
		return "", nil, false
	}
	quota, rest, found = strings.Cut(rest, ", requested: ")
	if !found {
		return "", nil, false
	}
	requested, _, _ := strings.Cut(rest, ", used: ")
	for _, kv := range strings.Split(requested, ",") {
		if k, _, found := strings.Cut(kv, "="); found && k != "" {
			resources = append(resources, corev1.ResourceName(k))
		}
	}
	return quota, resources, len(resources) > 0
}

// explainQuotaRefusal adds to a quota refusal of a Spark pod, which a
// ReplicaSet met, what already uses the resources it names.
func (r *Reconciler) explainQuotaRefusal(ctx context.Context, namespace, msg string) string {
	name, resources, ok := parseQuotaRefusal(msg)
	if !ok {
		return msg
	}
	var q *corev1.ResourceQuota
	for _, c := range r.cache.quotas(namespace) {
		if c.Name == name {
			q = c
		}
	}
	if q == nil {
		return msg
	}
	list, err := r.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return msg
	}
	for _, r := range resources {
		if users := usersOf(list.Items, q, r); len(users) > 0 {
			msg += fmt.Sprintf("; already using %s: %s", r, listUsers(users, r))
		}
	}
	return msg
}
