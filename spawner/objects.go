package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/dsmlp/spawner/serverid"
)

// Labels and annotations the objects carry.
const (
	// LabelUser is the platform's user label (a label-valid form of the
	// user name; the raw name is in AnnotationSpawnerUser).
	LabelUser = "dsmlp/user"
	// LabelCourse is the platform's course workspace label.
	LabelCourse = "dsmlp/course"
	// LabelGPUClass is the platform's GPU class label.
	LabelGPUClass = "gpu-class"

	// AnnotationUser is KubeSpawner's raw user name annotation.
	AnnotationUser = "hub.jupyter.org/username"
	// AnnotationServer is KubeSpawner's raw server name annotation, only on
	// named servers.
	AnnotationServer = "hub.jupyter.org/servername"
	// AnnotationSpawnerUser holds the raw user name on every object, so a
	// watcher can map an object back to its (user, server).
	AnnotationSpawnerUser = serverid.AnnotationUser
	// AnnotationSpawnerServer holds the raw server name on every object
	// ("" for the default server).
	AnnotationSpawnerServer = serverid.AnnotationServer

	// LabelUsername and LabelServername are KubeSpawner's slugged identity
	// labels.
	LabelUsername   = "hub.jupyter.org/username"
	LabelServername = "hub.jupyter.org/servername"
	// LabelComponent and LabelAppComponent carry component_label on pods;
	// LabelComponent is what pods are selected by.
	LabelComponent    = "component"
	LabelAppComponent = "app.kubernetes.io/component"
	// StorageComponent is the component label value of PVCs.
	StorageComponent = "singleuser-storage"
	// AnnotationStorageClass is the legacy storage class annotation
	// KubeSpawner sets beside storageClassName.
	AnnotationStorageClass = "volume.beta.kubernetes.io/storage-class"

	// ContainerName is the notebook container's name.
	ContainerName = "notebook"
	// PortName names the notebook port; the server URL is read from it.
	PortName = "notebook-port"
	// ServicePortName names the Service's port (Istio needs "http").
	ServicePortName = "http"
)

// Request is one spawn as the hub asks for it.
type Request struct {
	// User and Server are the hub's raw names; Server "" is the default
	// server.
	User, Server string
	// UserID is the hub's user id ({userid}); 0 if unknown.
	UserID int
	// Env is the hub's get_env(): JUPYTERHUB_* etc., passed through
	// unchanged.
	Env map[string]string
	// UserOptions are the user's choices (profile and options).
	UserOptions map[string]any
	// HubNamespace, if set, replaces Settings.HubNamespace (the namespace
	// the hub runs in, for {hubnamespace}), e.g. for spawnerd render.
	HubNamespace string
	// SavedPVCName is the pvc_name of the hub's saved state, "" if none.
	// With remember_pvc_name it replaces pvc_name_template's expansion
	// (and {pvc_name}), as KubeSpawner's load_state does.
	SavedPVCName string
	// StartTimeout, in seconds, is the hub's start_timeout for this spawn;
	// 0 keeps the configuration's.
	StartTimeout int
}

// Objects are what a spawn creates, in creation order.
type Objects struct {
	// Namespace is set only with enable_user_namespaces.
	Namespace *corev1.Namespace
	// PVC is set only with storage_pvc_ensure.
	PVC *corev1.PersistentVolumeClaim
	// Pod is the notebook pod.
	Pod *corev1.Pod
	// Service is set only with services_enabled. The caller adds an owner
	// reference to the created pod, which Build cannot know.
	Service *corev1.Service
}

// Build returns exactly the objects a spawn would create, as KubeSpawner's
// make_pod/make_pvc/make_service would, together with the effective
// settings for the request. Names are deterministic. Bad user options
// yield a *FieldError.
func Build(cfg *Config, req Request) (*Objects, *Settings, error) {
	s, err := cfg.Resolve(req.UserOptions)
	if err != nil {
		return nil, nil, err
	}
	n, err := NewNames(s, req.User, req.Server, req.UserID, req.HubNamespace)
	if err != nil {
		return nil, nil, fmt.Errorf("naming objects: %w", err)
	}
	if req.SavedPVCName != "" && s.RememberPVCName {
		n.PVCName, n.values["pvc_name"] = req.SavedPVCName, req.SavedPVCName
	}
	b := &builder{s: s, n: n, req: req}
	if err := b.expand(); err != nil {
		return nil, nil, err
	}
	objs := &Objects{Pod: b.pod()}
	if err := b.err; err != nil {
		return nil, nil, err
	}
	if s.EnableUserNamespaces {
		objs.Namespace = b.namespace()
	}
	if s.StoragePVCEnsure {
		objs.PVC = b.pvc()
	}
	if s.ServicesEnabled {
		objs.Service = b.service()
	}
	return objs, s, nil
}

// DefaultPod is the namespace and name of the pod that Build makes for a
// plain spawn of the server (no user_options): its names without the rest
// of the pod, for finding a server whose pod is not in a cache yet.
func DefaultPod(cfg *Config, user, server string) (namespace, name string, err error) {
	s, err := cfg.Resolve(nil)
	if err != nil {
		return "", "", err
	}
	n, err := NewNames(s, user, server, 0, "")
	if err != nil {
		return "", "", fmt.Errorf("naming objects: %w", err)
	}
	return n.Namespace, n.PodName, nil
}

// builder holds one spawn's settings, with templated traits expanded into
// e, and the first error met while building.
type builder struct {
	s   *Settings
	e   Settings
	n   *Names
	req Request
	// derived are JupyterHub's variables from notebook_dir etc.
	derived map[string]*string
	err     error
}

// expand renders every templated trait with the user's names, the way
// KubeSpawner's _expand_all does, and checks that expanded label values
// are valid.
func (b *builder) expand() error {
	e := *b.s
	var err error
	x := func(name string, ptr any) {
		if err == nil {
			if xerr := expandInto(b.n, ptr); xerr != nil {
				err = fmt.Errorf("expanding %s: %w", name, xerr)
			}
		}
	}
	x("extra_labels", &e.ExtraLabels)
	x("extra_annotations", &e.ExtraAnnotations)
	x("storage_extra_labels", &e.StorageExtraLabels)
	x("storage_extra_annotations", &e.StorageExtraAnnotations)
	x("storage_selector", &e.StorageSelector)
	x("user_namespace_labels", &e.UserNamespaceLabels)
	x("user_namespace_annotations", &e.UserNamespaceAnnotations)
	x("volumes", &e.Volumes)
	x("volume_mounts", &e.VolumeMounts)
	x("init_containers", &e.InitContainers)
	x("extra_containers", &e.ExtraContainers)
	x("extra_pod_config", &e.ExtraPodConfig)
	x("environment", &e.Environment)
	x("service_account", &e.ServiceAccount)
	x("working_dir", &e.WorkingDir)
	if err != nil {
		return err
	}
	baseURL := b.req.Env[EnvServicePrefix]
	if baseURL == "" {
		baseURL = "/" // as for JUPYTERHUB_SERVICE_URL
	}
	if b.derived, err = spawnerEnv(b.s, b.req.User, baseURL); err != nil {
		return err
	}
	for name, m := range map[string]map[string]string{
		"extra_labels":          e.ExtraLabels,
		"storage_extra_labels":  e.StorageExtraLabels,
		"user_namespace_labels": e.UserNamespaceLabels,
	} {
		for _, k := range sortedKeys(m) {
			if msgs := validation.IsValidLabelValue(m[k]); len(msgs) > 0 {
				return fmt.Errorf("%s[%s]: expanded value %q is not a valid label value: %s", name, k, m[k], strings.Join(msgs, "; "))
			}
		}
	}
	b.e = e
	return nil
}

// expandInto expands every string in *ptr (via its JSON form, so nested
// Kubernetes objects are covered) and stores the result back.
func expandInto(n *Names, ptr any) error {
	// Most templated traits are unset, and the set ones are mostly flat
	// string maps: both are done without the JSON round trip, which costs
	// most of a Build.
	switch v := reflect.ValueOf(ptr).Elem(); {
	case v.IsZero():
		return nil // null and "" expand to themselves
	case v.Kind() == reflect.Slice && v.Len() == 0:
		v.Set(reflect.MakeSlice(v.Type(), 0, 0)) // a new [], as decoding gives
		return nil
	case v.Kind() == reflect.Map && v.Len() == 0:
		v.Set(reflect.MakeMap(v.Type())) // a new {}
		return nil
	}
	if done, err := expandFlat(n, ptr); done || err != nil {
		return err
	}
	return expandJSON(n, ptr)
}

// expandJSON is expandInto for any type: through its JSON form.
func expandJSON(n *Names, ptr any) error {
	raw, err := json.Marshal(ptr)
	if err != nil {
		return err
	}
	v, err := decodeGeneric(raw)
	if err != nil {
		return err
	}
	v, err = expandStrings(v, n.Expand)
	if err != nil {
		return err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	rv := reflect.ValueOf(ptr).Elem()
	rv.SetZero()
	return json.Unmarshal(out, ptr)
}

// expandFlat expands a string, string pointer, string map, plain
// environment (no valueFrom) or empty selector in place, as
// expandInto's JSON round trip would; false leaves it to that round trip:
// other types, and strings that are not valid UTF-8, which JSON encoding
// would change.
func expandFlat(n *Names, ptr any) (bool, error) {
	x := func(s string) (string, bool, error) {
		if !utf8.ValidString(s) {
			return "", false, nil
		}
		out, err := n.Expand(s)
		return out, err == nil && utf8.ValidString(out), err
	}
	switch p := ptr.(type) {
	case *string:
		out, ok, err := x(*p)
		if ok {
			*p = out
		}
		return ok, err
	case **string:
		out, ok, err := x(**p)
		if ok {
			*p = &out
		}
		return ok, err
	case *EnvMap:
		m := make(EnvMap, len(*p))
		for k, v := range *p {
			if v.ValueFrom != nil || !utf8.ValidString(k) {
				return false, nil
			}
			name, ok, err := x(v.Name)
			if !ok {
				return false, err
			}
			value, ok, err := x(v.Value)
			if !ok {
				return false, err
			}
			m[k] = corev1.EnvVar{Name: name, Value: value}
		}
		*p = m
		return true, nil
	case **metav1.LabelSelector:
		if !reflect.ValueOf(**p).IsZero() {
			return false, nil
		}
		*p = &metav1.LabelSelector{} // {} decodes to a new empty selector
		return true, nil
	case *map[string]string:
		m := make(map[string]string, len(*p))
		for k, v := range *p {
			if !utf8.ValidString(k) {
				return false, nil
			}
			out, ok, err := x(v)
			if !ok {
				return false, err
			}
			m[k] = out
		}
		*p = m
		return true, nil
	}
	return false, nil
}

func (b *builder) commonLabels(extra map[string]string) map[string]string {
	// KubeSpawner's precedence: username label, then extra, then common.
	l := map[string]string{LabelUsername: labelSlug(b.req.User)}
	for k, v := range extra {
		l[k] = v
	}
	for k, v := range b.s.CommonLabels {
		l[k] = v
	}
	return l
}

// podLabels are the pod's labels without the platform ones; also the
// Service's selector. The component and servername labels cannot be
// overridden.
func (b *builder) podLabels() map[string]string {
	l := b.commonLabels(b.e.ExtraLabels)
	l[LabelAppComponent] = b.s.ComponentLabel
	l[LabelComponent] = b.s.ComponentLabel
	l[LabelServername] = labelSlug(b.req.Server)
	l[serverid.LabelKey] = serverid.Key(b.req.User, b.req.Server)
	return l
}

// withPlatform adds the platform labels, which are applied last so no
// trait can change them.
func (b *builder) withPlatform(l map[string]string, gpu bool) map[string]string {
	l[LabelUser] = labelSlug(b.req.User)
	if b.s.Course != "" {
		l[LabelCourse] = b.s.Course
	}
	if gpu && b.s.GPUClass != "" {
		l[LabelGPUClass] = b.s.GPUClass
	}
	return l
}

func (b *builder) annotations(extra map[string]string) map[string]string {
	a := map[string]string{AnnotationUser: b.req.User}
	if b.req.Server != "" {
		a[AnnotationServer] = b.req.Server
	}
	for k, v := range extra {
		a[k] = v
	}
	a[AnnotationSpawnerUser] = b.req.User
	a[AnnotationSpawnerServer] = b.req.Server
	return a
}

func (b *builder) meta(name string, labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: b.n.Namespace, Labels: labels, Annotations: annotations}
}

// pod follows KubeSpawner's make_pod step by step.
func (b *builder) pod() *corev1.Pod {
	s, e := b.s, &b.e

	// 1. Security contexts: the dedicated traits, then the dicts win.
	psc := &corev1.PodSecurityContext{FSGroup: s.FSGID}
	if len(s.SupplementalGIDs) > 0 {
		psc.SupplementalGroups = s.SupplementalGIDs
	}
	b.overlay(psc, toMap(s.PodSecurityContext))
	if reflect.DeepEqual(*psc, corev1.PodSecurityContext{}) {
		psc = nil
	}
	csc := &corev1.SecurityContext{RunAsUser: s.UID, RunAsGroup: s.GID, AllowPrivilegeEscalation: s.AllowPrivilegeEscalation}
	if s.Privileged {
		csc.Privileged = ptr(true)
	}
	b.overlay(csc, toMap(s.ContainerSecurityContext))
	if reflect.DeepEqual(*csc, corev1.SecurityContext{}) {
		csc = nil
	}

	// 2. The notebook container.
	var args []string
	if len(s.Cmd) > 0 {
		args = append(append([]string{}, s.Cmd...), s.Args...)
	}
	var lifecycle *corev1.Lifecycle
	if s.LifecycleHooks != nil && !reflect.DeepEqual(*s.LifecycleHooks, corev1.Lifecycle{}) {
		lifecycle = s.LifecycleHooks
	}
	mounts := e.VolumeMounts
	if mounts == nil {
		mounts = []corev1.VolumeMount{}
	}
	c := corev1.Container{
		Name:            ContainerName,
		Image:           s.Image,
		WorkingDir:      e.WorkingDir,
		Ports:           []corev1.ContainerPort{{Name: PortName, ContainerPort: int32(s.Port)}},
		Env:             buildEnv(s, e.Environment, b.req.Env, b.derived),
		Args:            args,
		Lifecycle:       lifecycle,
		Resources:       b.resources(),
		VolumeMounts:    mounts,
		SecurityContext: csc,
	}
	if s.ImagePullPolicy != nil {
		c.ImagePullPolicy = *s.ImagePullPolicy
	}
	b.overlay(&c, s.ExtraContainerConfig)

	// 3. The pod spec.
	volumes := e.Volumes
	if volumes == nil {
		volumes = []corev1.Volume{}
	}
	spec := corev1.PodSpec{
		RestartPolicy:     corev1.RestartPolicyOnFailure,
		ImagePullSecrets:  s.ImagePullSecrets,
		SecurityContext:   psc,
		Containers:        append([]corev1.Container{c}, e.ExtraContainers...),
		InitContainers:    e.InitContainers,
		Tolerations:       s.Tolerations,
		Volumes:           volumes,
		SchedulerName:     s.SchedulerName,
		Affinity:          b.affinity(),
		PriorityClassName: s.PriorityClassName,
	}
	if len(s.NodeSelector) > 0 {
		spec.NodeSelector = s.NodeSelector
	}
	if e.ServiceAccount != nil {
		spec.ServiceAccountName = *e.ServiceAccount
	}
	switch {
	case s.AutomountServiceAccountToken != nil:
		spec.AutomountServiceAccountToken = s.AutomountServiceAccountToken
	case s.ServiceAccount == nil:
		// Do not give the user's code the pod's API credentials by
		// accident.
		spec.AutomountServiceAccountToken = ptr(false)
	}
	b.overlay(&spec, e.ExtraPodConfig)
	if spec.Volumes == nil {
		spec.Volumes = []corev1.Volume{}
	}

	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: b.meta(b.n.PodName, b.withPlatform(b.podLabels(), true), b.annotations(e.ExtraAnnotations)),
		Spec:       spec,
	}
}

func (b *builder) resources() corev1.ResourceRequirements {
	s := b.s
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	if s.CPUGuarantee != nil && *s.CPUGuarantee != 0 {
		requests[corev1.ResourceCPU] = cpuQuantity(*s.CPUGuarantee)
	}
	if s.MemGuarantee > 0 {
		requests[corev1.ResourceMemory] = *resource.NewQuantity(int64(s.MemGuarantee), resource.DecimalSI)
	}
	for k, v := range s.ExtraResourceGuarantees {
		requests[corev1.ResourceName(k)] = resource.MustParse(v) // validated by Parse
	}
	if s.CPULimit != nil && *s.CPULimit != 0 {
		limits[corev1.ResourceCPU] = cpuQuantity(*s.CPULimit)
	}
	if s.MemLimit > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(int64(s.MemLimit), resource.DecimalSI)
	}
	for k, v := range s.ExtraResourceLimits {
		limits[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	r := corev1.ResourceRequirements{}
	if len(requests) > 0 {
		r.Requests = requests
	}
	if len(limits) > 0 {
		r.Limits = limits
	}
	return r
}

func cpuQuantity(f float64) resource.Quantity {
	return resource.MustParse(strconv.FormatFloat(f, 'f', -1, 64))
}

func (b *builder) affinity() *corev1.Affinity {
	s := b.s
	a := &corev1.Affinity{}
	if len(s.NodeAffinityPreferred) > 0 || len(s.NodeAffinityRequired) > 0 {
		a.NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: s.NodeAffinityPreferred}
		if len(s.NodeAffinityRequired) > 0 {
			a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: s.NodeAffinityRequired}
		}
	}
	if len(s.PodAffinityPreferred) > 0 || len(s.PodAffinityRequired) > 0 {
		a.PodAffinity = &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: s.PodAffinityPreferred,
			RequiredDuringSchedulingIgnoredDuringExecution:  s.PodAffinityRequired,
		}
	}
	if len(s.PodAntiAffinityPreferred) > 0 || len(s.PodAntiAffinityRequired) > 0 {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: s.PodAntiAffinityPreferred,
			RequiredDuringSchedulingIgnoredDuringExecution:  s.PodAntiAffinityRequired,
		}
	}
	if *a == (corev1.Affinity{}) {
		return nil
	}
	return a
}

// pvc follows KubeSpawner's get_pvc_manifest and make_pvc.
func (b *builder) pvc() *corev1.PersistentVolumeClaim {
	s, e := b.s, &b.e
	labels := b.commonLabels(e.StorageExtraLabels)
	// KubeSpawner gives PVCs component singleuser-storage but the pod's
	// app.kubernetes.io/component.
	labels[LabelAppComponent] = s.ComponentLabel
	labels[LabelComponent] = StorageComponent
	annotations := b.annotations(e.StorageExtraAnnotations)
	spec := corev1.PersistentVolumeClaimSpec{
		AccessModes: s.StorageAccessModes,
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(s.StorageCapacity)},
		},
	}
	if s.StorageClass != nil {
		annotations[AnnotationStorageClass] = *s.StorageClass
		spec.StorageClassName = s.StorageClass
	}
	if sel := e.StorageSelector; sel != nil && !reflect.DeepEqual(*sel, metav1.LabelSelector{}) {
		spec.Selector = sel
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: b.meta(b.n.PVCName, b.withPlatform(labels, true), annotations),
		Spec:       spec,
	}
}

// service follows KubeSpawner's get_service_manifest and make_service.
func (b *builder) service() *corev1.Service {
	e := &b.e
	port := int32(b.s.Port)
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: b.meta(b.n.PodName, b.withPlatform(b.commonLabels(e.ExtraLabels), true), b.annotations(e.ExtraAnnotations)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Ports:    []corev1.ServicePort{{Name: ServicePortName, Port: port, TargetPort: intstr.FromInt32(port)}},
			Selector: b.podLabels(),
		},
	}
}

// namespace follows KubeSpawner's make_namespace, plus the platform's user
// and course labels. The GPU class is left off: a namespace holds all of a
// user's servers.
func (b *builder) namespace() *corev1.Namespace {
	e := &b.e
	labels := map[string]string{}
	for k, v := range e.UserNamespaceLabels {
		labels[k] = v
	}
	annotations := map[string]string{}
	for k, v := range e.UserNamespaceAnnotations {
		annotations[k] = v
	}
	annotations[AnnotationSpawnerUser] = b.req.User
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: b.n.Namespace, Labels: b.withPlatform(labels, false), Annotations: annotations},
	}
}

// overlay replaces top-level fields of *dst with those in patch, as
// KubeSpawner's update_k8s_model and dict.update do.
func (b *builder) overlay(dst any, patch map[string]any) {
	if len(patch) == 0 || b.err != nil {
		return
	}
	m := toMap(dst)
	for k, v := range patch {
		m[k] = v
	}
	raw, err := json.Marshal(m)
	if err == nil {
		reflect.ValueOf(dst).Elem().SetZero()
		err = json.Unmarshal(raw, dst)
	}
	if err != nil {
		b.err = fmt.Errorf("applying %T overrides: %w", dst, err)
	}
}

// toMap returns v's JSON object form; nil for a nil pointer or map.
func toMap(v any) map[string]any {
	if rv := reflect.ValueOf(v); !rv.IsValid() || (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map) && rv.IsNil() {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	g, err := decodeGeneric(raw)
	if err != nil {
		return nil
	}
	m, _ := g.(map[string]any)
	return m
}

func ptr[T any](v T) *T { return &v }

// PodURL is the URL the hub and proxy reach the server at, as KubeSpawner's
// _get_pod_url builds it: http://<podIP>:<notebook-port> (IPv6 bracketed),
// the Service's DNS name with services_enabled, and pod_connect_ip
// replacing the host (each DNS label containing '{' is a template).
func PodURL(pod *corev1.Pod, s *Settings) string {
	host := hostForURL(pod.Status.PodIP)
	if s.ServicesEnabled {
		if dns, err := formatKeys(s.DNSNameTemplate, map[string]string{"name": pod.Name, "namespace": pod.Namespace}); err == nil {
			host = dns
		}
	}
	if s.PodConnectIP != "" {
		host = connectHost(pod, s)
	}
	return "http://" + host + ":" + strconv.Itoa(notebookPort(pod, s))
}

func connectHost(pod *corev1.Pod, s *Settings) string {
	user := pod.Annotations[AnnotationSpawnerUser]
	if user == "" {
		user = pod.Annotations[AnnotationUser]
	}
	server := pod.Annotations[AnnotationSpawnerServer]
	if _, ok := pod.Annotations[AnnotationSpawnerServer]; !ok {
		server = pod.Annotations[AnnotationServer]
	}
	n, err := NewNames(s, user, server, 0, "")
	labels := strings.Split(s.PodConnectIP, ".")
	for i, l := range labels {
		if err != nil || !strings.Contains(l, "{") {
			continue
		}
		n.values["pod_name"], n.values["namespace"] = pod.Name, pod.Namespace
		if x, xerr := n.Expand(l); xerr == nil {
			labels[i] = x
		}
	}
	return strings.Join(labels, ".")
}

// notebookPort reads the port named notebook-port (KubeSpawner #903), so a
// config change does not alter a running pod's URL.
func notebookPort(pod *corev1.Pod, s *Settings) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == PortName {
				return int(p.ContainerPort)
			}
		}
	}
	return s.Port
}

// Render prints Build's objects as a YAML stream (Namespace, PVC, Pod,
// Service order; "---" separated), without the empty status and
// creationTimestamp fields the API types would add.
func Render(cfg *Config, req Request) ([]byte, error) {
	objs, _, err := Build(cfg, req)
	if err != nil {
		return nil, err
	}
	return renderObjects(objs.Namespace, objs.PVC, objs.Pod, objs.Service)
}

// renderObjects prints objects as a YAML stream, skipping nil ones and
// leaving out empty spec/status and null timestamps.
func renderObjects(objs ...any) ([]byte, error) {
	var out bytes.Buffer
	for _, o := range objs {
		if reflect.ValueOf(o).IsNil() {
			continue
		}
		m := toMap(o)
		dropNullTimestamps(m)
		for _, k := range []string{"spec", "status"} {
			if sub, ok := m[k].(map[string]any); ok && allEmpty(sub) {
				delete(m, k)
			}
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("rendering %T: %w", o, err)
		}
		if out.Len() > 0 {
			out.WriteString("---\n")
		}
		out.Write(y)
	}
	return out.Bytes(), nil
}

// allEmpty reports whether every value in m is an empty object, as in a
// new Service's status ({loadBalancer: {}}) or a Namespace's spec ({}).
func allEmpty(m map[string]any) bool {
	for _, v := range m {
		if sub, ok := v.(map[string]any); !ok || len(sub) > 0 {
			return false
		}
	}
	return true
}
