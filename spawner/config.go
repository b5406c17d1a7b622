package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Config is the spawner's configuration file.
type Config struct {
	// KubeSpawner holds the base settings: every KubeSpawner trait, with
	// defaults applied, before any profile is chosen.
	KubeSpawner Settings `json:"kubespawner"`
	// Spark is the top-level spark section, kept unvalidated and unused: a
	// cluster is declared with the kubespawner trait spark (Settings.Spark),
	// so that profiles can override it.
	Spark json.RawMessage `json:"spark,omitempty"`
	// Reservation is reserved for the GPU reservation settings; kept
	// unvalidated.
	Reservation json.RawMessage `json:"reservation,omitempty"`

	// base is the kubespawner section as a generic tree with defaults
	// filled in; profiles are applied to copies of it.
	base map[string]any
	// profiles is profile_list with slugs and defaults filled in.
	profiles []Profile
	// place caches where the configuration can put pods.
	place placementCache
	// resolved caches Resolve's settings per user_options.
	resolved resolveCache
}

// Settings holds KubeSpawner's traits under their KubeSpawner names and
// meanings. Fields whose values are templates (see Names.Expand) are
// expanded only when objects are built.
type Settings struct {
	// Image is the notebook image; also JUPYTER_IMAGE and
	// JUPYTER_IMAGE_SPEC. Default quay.io/jupyterhub/singleuser:latest.
	Image string `json:"image"`
	// ImagePullPolicy is Always, IfNotPresent or Never; nil (default)
	// omits it and lets Kubernetes choose.
	ImagePullPolicy *corev1.PullPolicy `json:"image_pull_policy"`
	// ImagePullSecrets names the pod's image pull secrets. Default none.
	ImagePullSecrets PullSecrets `json:"image_pull_secrets"`
	// Cmd is the command put in the container's args (the image ENTRYPOINT
	// stays); nil (default) keeps the image's CMD.
	Cmd Command `json:"cmd"`
	// Args are JupyterHub's Spawner.args, appended after Cmd; ignored
	// without Cmd. Default none.
	Args []string `json:"args"`
	// Port is the notebook port (container port notebook-port). Default
	// 8888; 0 also means 8888.
	Port int `json:"port"`
	// IP is the address the server binds to, passed in
	// JUPYTERHUB_SERVICE_URL. Default 0.0.0.0.
	IP string `json:"ip"`
	// NotebookDir is JupyterHub's Spawner.notebook_dir, the server's root
	// directory, passed as JUPYTERHUB_ROOT_DIR. "{username}" (the raw user
	// name) and "{base_url}" (the server's URL prefix) are replaced, and
	// the deprecated "%U" means "{username}". Nil (default) passes on what
	// the hub sent, i.e. its own c.Spawner.notebook_dir; "" sends none.
	NotebookDir *string `json:"notebook_dir"`
	// DefaultURL is JupyterHub's Spawner.default_url, the URL the server
	// opens at (e.g. /lab), passed as JUPYTERHUB_DEFAULT_URL; templated
	// like NotebookDir. Nil (default) passes on what the hub sent; "" sends
	// none.
	DefaultURL *string `json:"default_url"`
	// Debug is JupyterHub's Spawner.debug: JUPYTERHUB_DEBUG=1, debug logs
	// in the server. Nil (default) passes on what the hub sent; false sends
	// none.
	Debug *bool `json:"debug"`
	// DisableUserConfig is JupyterHub's Spawner.disable_user_config:
	// JUPYTERHUB_DISABLE_USER_CONFIG=1, the server ignores config files in
	// the user's home. Nil (default) passes on what the hub sent; false
	// sends none.
	DisableUserConfig *bool `json:"disable_user_config"`
	// CPULimit is the CPU limit in cores; nil or 0 (default) means none.
	CPULimit *float64 `json:"cpu_limit"`
	// CPUGuarantee is the CPU request in cores; nil or 0 (default) means
	// none.
	CPUGuarantee *float64 `json:"cpu_guarantee"`
	// MemLimit is the memory limit ("2G" = 2*1024^3 bytes); 0 (default)
	// means none.
	MemLimit ByteSize `json:"mem_limit"`
	// MemGuarantee is the memory request; 0 (default) means none.
	MemGuarantee ByteSize `json:"mem_guarantee"`
	// ExtraResourceLimits are more container limits, e.g.
	// {"nvidia.com/gpu": "1"}. Default none.
	ExtraResourceLimits ResourceMap `json:"extra_resource_limits"`
	// ExtraResourceGuarantees are more container requests. Default none.
	ExtraResourceGuarantees ResourceMap `json:"extra_resource_guarantees"`
	// Environment adds environment variables after JupyterHub's own;
	// values are strings or EnvVar objects and are templates. Default none.
	Environment EnvMap `json:"environment" trait:"tmpl"`
	// CommonLabels go on every object. Default app, heritage,
	// app.kubernetes.io/name (all "jupyterhub") and
	// app.kubernetes.io/managed-by (kubespawner).
	CommonLabels map[string]string `json:"common_labels"`
	// ExtraLabels go on the pod and Service; values are templates.
	ExtraLabels map[string]string `json:"extra_labels" trait:"tmpl"`
	// ExtraAnnotations go on the pod and Service; values are templates.
	ExtraAnnotations map[string]string `json:"extra_annotations" trait:"tmpl"`
	// NodeSelector is the pod's nodeSelector. Default none.
	NodeSelector map[string]string `json:"node_selector"`
	// Tolerations are the pod's tolerations (a list, or a dict whose values
	// are taken sorted by key). Default none.
	Tolerations []corev1.Toleration `json:"tolerations" trait:"listdict,k8s"`
	// NodeAffinityPreferred are preferred node affinity terms.
	NodeAffinityPreferred []corev1.PreferredSchedulingTerm `json:"node_affinity_preferred" trait:"listdict,k8s"`
	// NodeAffinityRequired are required node selector terms.
	NodeAffinityRequired []corev1.NodeSelectorTerm `json:"node_affinity_required" trait:"listdict,k8s"`
	// PodAffinityPreferred are preferred pod affinity terms.
	PodAffinityPreferred []corev1.WeightedPodAffinityTerm `json:"pod_affinity_preferred" trait:"listdict,k8s"`
	// PodAffinityRequired are required pod affinity terms.
	PodAffinityRequired []corev1.PodAffinityTerm `json:"pod_affinity_required" trait:"listdict,k8s"`
	// PodAntiAffinityPreferred are preferred pod anti-affinity terms.
	PodAntiAffinityPreferred []corev1.WeightedPodAffinityTerm `json:"pod_anti_affinity_preferred" trait:"listdict,k8s"`
	// PodAntiAffinityRequired are required pod anti-affinity terms.
	PodAntiAffinityRequired []corev1.PodAffinityTerm `json:"pod_anti_affinity_required" trait:"listdict,k8s"`
	// Volumes are the pod's volumes; strings are templates. Default none.
	Volumes []corev1.Volume `json:"volumes" trait:"listdict,k8s,tmpl"`
	// VolumeMounts are the notebook container's mounts; strings are
	// templates. Default none.
	VolumeMounts []corev1.VolumeMount `json:"volume_mounts" trait:"listdict,k8s,tmpl"`
	// StoragePVCEnsure creates the user's PVC before the pod. Default false.
	StoragePVCEnsure bool `json:"storage_pvc_ensure"`
	// StorageClass sets the PVC's storageClassName and the
	// volume.beta.kubernetes.io/storage-class annotation; nil (default)
	// omits both, while "" explicitly asks for no class.
	StorageClass *string `json:"storage_class"`
	// StorageCapacity is the PVC's storage request, e.g. "10Gi"; required
	// with StoragePVCEnsure.
	StorageCapacity string `json:"storage_capacity"`
	// StorageAccessModes are the PVC's access modes. Default
	// [ReadWriteOnce].
	StorageAccessModes []corev1.PersistentVolumeAccessMode `json:"storage_access_modes"`
	// StorageExtraLabels go on the PVC; values are templates.
	StorageExtraLabels map[string]string `json:"storage_extra_labels" trait:"tmpl"`
	// StorageExtraAnnotations go on the PVC; values are templates.
	StorageExtraAnnotations map[string]string `json:"storage_extra_annotations" trait:"tmpl"`
	// StorageSelector is the PVC's selector; strings are templates.
	// Empty (default) means none.
	StorageSelector *metav1.LabelSelector `json:"storage_selector" trait:"tmpl"`
	// PVCNameTemplate names the PVC. Default claim-{user_server}.
	PVCNameTemplate string `json:"pvc_name_template"`
	// PodNameTemplate names the pod and Service. Default
	// jupyter-{user_server}.
	PodNameTemplate string `json:"pod_name_template"`
	// Namespace is where objects are created. Default "default".
	Namespace string `json:"namespace"`
	// HubNamespace is the namespace the hub runs in, for the template key
	// {hubnamespace} ("user" when it is "default"); the same for every
	// profile. Default, as KubeSpawner finds it: the namespace in
	// /var/run/secrets/kubernetes.io/serviceaccount/namespace (spawnerd's
	// pod, deployed beside the hub), else "default". A platform addition:
	// KubeSpawner runs in the hub and reads its own pod's.
	HubNamespace string `json:"hub_namespace"`
	// EnableUserNamespaces gives each user a namespace named by
	// UserNamespaceTemplate. Default false.
	EnableUserNamespaces bool `json:"enable_user_namespaces"`
	// UserNamespaceTemplate names user namespaces. Default
	// {hubnamespace}-{username}.
	UserNamespaceTemplate string `json:"user_namespace_template"`
	// UserNamespaceLabels go on a created user namespace; templates.
	UserNamespaceLabels map[string]string `json:"user_namespace_labels" trait:"tmpl"`
	// UserNamespaceAnnotations go on a created user namespace; templates.
	UserNamespaceAnnotations map[string]string `json:"user_namespace_annotations" trait:"tmpl"`
	// ServiceAccount is the pod's serviceAccountName (a template); nil
	// (default) leaves it unset.
	ServiceAccount *string `json:"service_account" trait:"tmpl"`
	// AutomountServiceAccountToken is the pod's setting; nil (default)
	// means false unless ServiceAccount is set.
	AutomountServiceAccountToken *bool `json:"automount_service_account_token"`
	// UID is the container's runAsUser; nil (default) leaves it unset.
	UID *int64 `json:"uid"`
	// GID is the container's runAsGroup; nil (default) leaves it unset.
	GID *int64 `json:"gid"`
	// FSGID is the pod's fsGroup; nil (default) leaves it unset.
	FSGID *int64 `json:"fs_gid"`
	// SupplementalGIDs are the pod's supplementalGroups. Default none.
	SupplementalGIDs []int64 `json:"supplemental_gids"`
	// Privileged runs the container privileged. Default false.
	Privileged bool `json:"privileged"`
	// AllowPrivilegeEscalation is the container's setting. Default false;
	// null omits it.
	AllowPrivilegeEscalation *bool `json:"allow_privilege_escalation"`
	// ContainerSecurityContext (camelCase keys) overrides the fields the
	// dedicated traits set on the container. Default empty.
	ContainerSecurityContext *corev1.SecurityContext `json:"container_security_context" trait:"camel"`
	// PodSecurityContext (camelCase keys) overrides fs_gid and
	// supplemental_gids on the pod. Default empty.
	PodSecurityContext *corev1.PodSecurityContext `json:"pod_security_context" trait:"camel"`
	// LifecycleHooks is the notebook container's lifecycle. Default empty.
	LifecycleHooks *corev1.Lifecycle `json:"lifecycle_hooks" trait:"k8s"`
	// InitContainers run before the notebook; strings are templates.
	InitContainers []corev1.Container `json:"init_containers" trait:"listdict,k8s,tmpl"`
	// ExtraContainers run beside the notebook; strings are templates.
	ExtraContainers []corev1.Container `json:"extra_containers" trait:"listdict,k8s,tmpl"`
	// ExtraPodConfig replaces top-level pod.spec fields, last; strings are
	// templates. Default empty.
	ExtraPodConfig PodSpecPatch `json:"extra_pod_config" trait:"tmpl"`
	// ExtraContainerConfig replaces top-level notebook container fields,
	// last; not templated. Default empty.
	ExtraContainerConfig ContainerPatch `json:"extra_container_config"`
	// PriorityClassName is the pod's priority class. Default none.
	PriorityClassName string `json:"priority_class_name"`
	// SchedulerName is the pod's scheduler. Default none.
	SchedulerName string `json:"scheduler_name"`
	// WorkingDir is the container's workingDir (a template). Default none.
	WorkingDir string `json:"working_dir" trait:"tmpl"`
	// ProfileList is the choice of profiles offered to users. Default none.
	ProfileList ProfileList `json:"profile_list"`
	// StartTimeout is how long a start may take, in seconds. Default 60.
	StartTimeout int `json:"start_timeout"`
	// DeleteStoppedPods deletes a pod whose notebook stopped. Default true.
	DeleteStoppedPods bool `json:"delete_stopped_pods"`
	// DeleteGracePeriod is the grace period for stop, in seconds. Default 1.
	DeleteGracePeriod int64 `json:"delete_grace_period"`
	// SlugScheme is "safe" (default) or the legacy "escape".
	SlugScheme string `json:"slug_scheme"`
	// ComponentLabel is the value of the component labels on pods.
	// Default singleuser-server.
	ComponentLabel string `json:"component_label"`
	// ServicesEnabled puts a ClusterIP Service in front of each pod.
	// Default false.
	ServicesEnabled bool `json:"services_enabled"`
	// DNSNameTemplate ({name}, {namespace}) is the Service's DNS name.
	// Default {name}.{namespace}.svc.cluster.local.
	DNSNameTemplate string `json:"dns_name_template"`
	// EventsEnabled reports pod events as progress. Default true.
	EventsEnabled bool `json:"events_enabled"`
	// SlowSpawnMessageThreshold is when, in seconds, the slow-spawn
	// message starts; 0 disables it. Default 60.
	SlowSpawnMessageThreshold int `json:"slow_spawn_message_threshold"`
	// SlowSpawnMessageFrequency is how often, in seconds, it repeats.
	// Default 5.
	SlowSpawnMessageFrequency int `json:"slow_spawn_message_frequency"`
	// SlowSpawnMessage is the message; {seconds} is the time waited.
	SlowSpawnMessage string `json:"slow_spawn_message"`
	// DeletePVC deletes the PVC when the user or server is deleted.
	// Default true.
	DeletePVC bool `json:"delete_pvc"`
	// RememberPVCName keeps a PVC's name once it exists. Default true.
	RememberPVCName bool `json:"remember_pvc_name"`
	// K8sAPIRequestTimeout bounds one API request, in seconds. Default 3.
	K8sAPIRequestTimeout int `json:"k8s_api_request_timeout"`
	// K8sAPIRequestRetryTimeout bounds an API call's retries, in seconds.
	// Default 30.
	K8sAPIRequestRetryTimeout int `json:"k8s_api_request_retry_timeout"`
	// PodConnectIP replaces the host the hub connects to; each DNS label
	// containing '{' is a template. Default none (the pod IP).
	PodConnectIP string `json:"pod_connect_ip"`
	// Course is the platform's dsmlp/course label value (the course
	// workspace); a profile may override it. Default none.
	Course string `json:"course"`
	// GPUClass is the platform's gpu-class label value; a profile may set
	// it. Default none.
	GPUClass string `json:"gpu_class"`
	// ReservationWaitTimeout is how long, in seconds, a start may wait
	// while the GPU reservation engine says the wait can clear (a booking
	// opens soon, a lease is retried); start_timeout applies otherwise.
	// A platform addition. Default 2400 (the 30-minute claim horizon plus
	// time to start).
	ReservationWaitTimeout int `json:"reservation_wait_timeout"`
	// Spark declares a Spark cluster beside the notebook (see SparkSpec);
	// a platform addition. Default null: none.
	Spark SparkSpec `json:"spark"`
}

// Defaults that are not empty.
const (
	DefaultImage                     = "quay.io/jupyterhub/singleuser:latest"
	DefaultPort                      = 8888
	DefaultIP                        = "0.0.0.0"
	DefaultPVCNameTemplate           = "claim-{user_server}"
	DefaultPodNameTemplate           = "jupyter-{user_server}"
	DefaultNamespace                 = "default"
	DefaultUserNamespaceTemplate     = "{hubnamespace}-{username}"
	DefaultStartTimeout              = 60
	DefaultReservationWaitTimeout    = 2400
	DefaultDeleteGracePeriod         = 1
	DefaultComponentLabel            = "singleuser-server"
	DefaultDNSNameTemplate           = "{name}.{namespace}.svc.cluster.local"
	DefaultSlowSpawnMessageThreshold = 60
	DefaultSlowSpawnMessageFrequency = 5
	DefaultSlowSpawnMessage          = "Server launch is taking longer than expected. Please be patient! Current time spent waiting: {seconds} seconds."
	DefaultK8sAPIRequestTimeout      = 3
	DefaultK8sAPIRequestRetryTimeout = 30
	DefaultStorageAccessMode         = corev1.ReadWriteOnce
)

// defaultTraits returns every trait's KubeSpawner default as the generic
// value a config file would hold. Filling defaults in before decoding lets
// a profile's dict override merge into a default dict (common_labels), as
// it merges into the trait's current value in KubeSpawner.
func defaultTraits() map[string]any {
	none := func() map[string]any { return map[string]any{} }
	empty := func() []any { return []any{} }
	return map[string]any{
		"image":                     DefaultImage,
		"image_pull_policy":         nil,
		"image_pull_secrets":        empty(),
		"cmd":                       nil,
		"args":                      empty(),
		"port":                      DefaultPort,
		"ip":                        DefaultIP,
		"notebook_dir":              nil,
		"default_url":               nil,
		"debug":                     nil,
		"disable_user_config":       nil,
		"cpu_limit":                 nil,
		"cpu_guarantee":             nil,
		"mem_limit":                 nil,
		"mem_guarantee":             nil,
		"extra_resource_limits":     none(),
		"extra_resource_guarantees": none(),
		"environment":               none(),
		"common_labels": map[string]any{
			"app.kubernetes.io/name":       "jupyterhub",
			"app.kubernetes.io/managed-by": "kubespawner",
			"app":                          "jupyterhub",
			"heritage":                     "jupyterhub",
		},
		"extra_labels":                    none(),
		"extra_annotations":               none(),
		"node_selector":                   none(),
		"tolerations":                     empty(),
		"node_affinity_preferred":         empty(),
		"node_affinity_required":          empty(),
		"pod_affinity_preferred":          empty(),
		"pod_affinity_required":           empty(),
		"pod_anti_affinity_preferred":     empty(),
		"pod_anti_affinity_required":      empty(),
		"volumes":                         empty(),
		"volume_mounts":                   empty(),
		"storage_pvc_ensure":              false,
		"storage_class":                   nil,
		"storage_capacity":                nil,
		"storage_access_modes":            []any{string(DefaultStorageAccessMode)},
		"storage_extra_labels":            none(),
		"storage_extra_annotations":       none(),
		"storage_selector":                none(),
		"pvc_name_template":               DefaultPVCNameTemplate,
		"pod_name_template":               DefaultPodNameTemplate,
		"namespace":                       DefaultNamespace,
		"hub_namespace":                   "",
		"enable_user_namespaces":          false,
		"user_namespace_template":         DefaultUserNamespaceTemplate,
		"user_namespace_labels":           none(),
		"user_namespace_annotations":      none(),
		"service_account":                 nil,
		"automount_service_account_token": nil,
		"uid":                             nil,
		"gid":                             nil,
		"fs_gid":                          nil,
		"supplemental_gids":               empty(),
		"privileged":                      false,
		"allow_privilege_escalation":      false,
		"container_security_context":      none(),
		"pod_security_context":            none(),
		"lifecycle_hooks":                 none(),
		"init_containers":                 empty(),
		"extra_containers":                empty(),
		"extra_pod_config":                none(),
		"extra_container_config":          none(),
		"priority_class_name":             "",
		"scheduler_name":                  nil,
		"working_dir":                     nil,
		"profile_list":                    empty(),
		"start_timeout":                   DefaultStartTimeout,
		"reservation_wait_timeout":        DefaultReservationWaitTimeout,
		"delete_stopped_pods":             true,
		"delete_grace_period":             DefaultDeleteGracePeriod,
		"slug_scheme":                     SlugSchemeSafe,
		"component_label":                 DefaultComponentLabel,
		"services_enabled":                false,
		"dns_name_template":               DefaultDNSNameTemplate,
		"events_enabled":                  true,
		"slow_spawn_message_threshold":    DefaultSlowSpawnMessageThreshold,
		"slow_spawn_message_frequency":    DefaultSlowSpawnMessageFrequency,
		"slow_spawn_message":              DefaultSlowSpawnMessage,
		"delete_pvc":                      true,
		"remember_pvc_name":               true,
		"k8s_api_request_timeout":         DefaultK8sAPIRequestTimeout,
		"k8s_api_request_retry_timeout":   DefaultK8sAPIRequestRetryTimeout,
		"pod_connect_ip":                  "",
		"course":                          "",
		"gpu_class":                       "",
		"spark":                           nil,
	}
}

// withDefaults returns raw with every missing trait set to its default.
// Setting a trait replaces its default entirely, as traitlets config does.
func withDefaults(raw map[string]any) map[string]any {
	out := defaultTraits()
	for k, v := range raw {
		out[k] = v
	}
	return out
}

// finishDefaults applies the defaults that depend on a decoded value.
func finishDefaults(s *Settings) {
	if s.Port == 0 {
		s.Port = DefaultPort // KubeSpawner forces jh's port 0 to 8888
	}
	// JupyterHub's _deprecate_percent_u validator (jupyterhub/spawner.py)
	// rewrites the 0.6 spelling of the user name.
	for _, p := range []*string{s.NotebookDir, s.DefaultURL} {
		if p != nil {
			*p = strings.ReplaceAll(*p, "%U", "{username}")
		}
	}
}

// ServiceAccountNamespaceFile holds the namespace of the pod a process runs
// in; KubeSpawner's _namespace_default reads it for the hub's namespace.
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// FieldError is what bad user input yields: Field names the key (e.g.
// "user_options.profile") and Message says what is wrong with it.
type FieldError struct {
	Field, Message string
}

// Error implements error.
func (e *FieldError) Error() string {
	return e.Field + ": " + e.Message
}

// ValidationError is an invalid configuration: every problem found, each
// with the path of its key in the file.
type ValidationError struct {
	Errors field.ErrorList
}

// Error implements error, one problem per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.Error()
	}
	return "invalid spawner config:\n  " + strings.Join(lines, "\n  ")
}

// Load reads a configuration file and parses it. Without hub_namespace the
// hub's namespace is read from ServiceAccountNamespaceFile.
func Load(path string) (*Config, error) {
	return LoadWithNamespaceFile(path, ServiceAccountNamespaceFile)
}

// LoadWithNamespaceFile is Load reading the default hub_namespace from nsFile
// (a missing file means "default", as in KubeSpawner).
func LoadWithNamespaceFile(path, nsFile string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading spawner config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	if cfg.KubeSpawner.HubNamespace == "" {
		ns, err := os.ReadFile(nsFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("reading the hub namespace: %w", err)
		default:
			cfg.setHubNamespace(strings.TrimSpace(string(ns)))
		}
	}
	return cfg, nil
}

// setHubNamespace sets the hub_namespace every spawn's settings get.
func (c *Config) setHubNamespace(ns string) {
	c.base["hub_namespace"] = ns
	c.KubeSpawner.HubNamespace = ns
	c.place.mu.Lock()
	c.place.p = nil
	c.place.mu.Unlock()
}

// Parse decodes a YAML (or JSON) configuration strictly, so an unknown key
// is an error, fills in defaults and validates it. An invalid configuration
// yields a *ValidationError listing every problem.
func Parse(data []byte) (*Config, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("parsing spawner config: %w", err)
	}
	var top struct {
		KubeSpawner json.RawMessage `json:"kubespawner"`
		Spark       json.RawMessage `json:"spark"`
		Reservation json.RawMessage `json:"reservation"`
	}
	root := field.NewPath("kubespawner")
	var errs field.ErrorList
	strict, err := sigsjson.UnmarshalStrict(j, &top)
	if err != nil {
		return nil, fmt.Errorf("parsing spawner config: %w", err)
	}
	for _, e := range strict {
		errs = append(errs, field.Invalid(field.NewPath(fieldPathOf(e)), field.OmitValueType{}, "unknown key"))
	}

	raw := map[string]any{}
	if len(top.KubeSpawner) > 0 && string(top.KubeSpawner) != "null" {
		v, err := decodeGeneric(top.KubeSpawner)
		if err != nil {
			return nil, fmt.Errorf("parsing spawner config: %w", err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &ValidationError{field.ErrorList{field.Invalid(root, field.OmitValueType{}, "must be a dict of KubeSpawner traits")}}
		}
		raw = m
	}

	order, err := keyOrder(data)
	if err != nil {
		return nil, fmt.Errorf("parsing spawner config: %w", err)
	}

	cfg := &Config{Spark: nonNull(top.Spark), Reservation: nonNull(top.Reservation), base: withDefaults(raw)}
	s, derrs := decodeSettings(cfg.base, root)
	errs = append(errs, derrs...)
	// Validate what did decode, so one run reports every problem; a trait
	// that failed to decode has a zero value whose checks would only add
	// noise.
	failed := map[string]bool{}
	for _, e := range derrs {
		failed[traitOf(e.Field)] = true
	}
	finishDefaults(s)
	for _, e := range validateSettings(s, cfg.base, root) {
		if !failed[traitOf(e.Field)] {
			errs = append(errs, e)
		}
	}
	var perrs field.ErrorList
	cfg.profiles, perrs = initProfiles(s.ProfileList, order)
	errs = append(errs, perrs...)
	if len(errs) == 0 {
		errs = append(errs, cfg.validateProfiles()...)
	}
	if len(errs) == 0 {
		cfg.fillGPUClasses()
	}
	cfg.KubeSpawner = *s
	cfg.KubeSpawner.ProfileList = cfg.Profiles()
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, &ValidationError{Errors: errs}
	}
	return cfg, nil
}

func fieldPathOf(e error) string {
	if fe, ok := e.(sigsjson.FieldError); ok {
		return fe.FieldPath()
	}
	return e.Error()
}

func nonNull(m json.RawMessage) json.RawMessage {
	if len(m) == 0 || string(m) == "null" {
		return nil
	}
	return m
}

// keyOrder records the order of keys of every YAML mapping, by the path of
// the mapping ("kubespawner/profile_list/0/profile_options"). The JSON
// conversion sorts keys, but a profile's options and choices are shown, and
// defaulted, in the order written.
func keyOrder(data []byte) (map[string][]string, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	order := map[string][]string{}
	var walk func(n *yamlv3.Node, path string, depth int)
	walk = func(n *yamlv3.Node, path string, depth int) {
		if n == nil || depth > 64 {
			return
		}
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				walk(c, path, depth+1)
			}
		case yamlv3.AliasNode:
			walk(n.Alias, path, depth+1)
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				order[path] = append(order[path], k)
				walk(n.Content[i+1], path+"/"+k, depth+1)
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s/%d", path, i), depth+1)
			}
		}
	}
	walk(&doc, "", 0)
	return order, nil
}
