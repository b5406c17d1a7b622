package spawner

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateSettings checks decoded settings for values Kubernetes or
// KubeSpawner would reject later, so a bad config fails at start-up with
// the key named. raw is the generic form the settings came from, whose
// strings are checked as templates.
func validateSettings(s *Settings, raw map[string]any, p *field.Path) field.ErrorList {
	var errs field.ErrorList

	// Templates: every string of a templated trait, and the name templates.
	for _, key := range sortedKeys(raw) {
		if t, ok := traits[key]; ok && t.opts.tmpl {
			errs = append(errs, checkTemplates(raw[key], p.Child(key))...)
		}
	}
	for key, tmpl := range map[string]string{
		"pod_name_template":       s.PodNameTemplate,
		"pvc_name_template":       s.PVCNameTemplate,
		"user_namespace_template": s.UserNamespaceTemplate,
	} {
		switch err := checkTemplate(tmpl, templateKeys); {
		case tmpl == "":
			errs = append(errs, field.Required(p.Child(key), ""))
		case err != nil:
			errs = append(errs, field.Invalid(p.Child(key), tmpl, err.Error()))
		}
	}
	if err := checkTemplate(s.DNSNameTemplate, []string{"name", "namespace"}); err != nil {
		errs = append(errs, field.Invalid(p.Child("dns_name_template"), s.DNSNameTemplate, err.Error()))
	}
	for key, v := range map[string]*string{"notebook_dir": s.NotebookDir, "default_url": s.DefaultURL} {
		if v == nil {
			continue
		}
		if err := checkTemplate(*v, spawnerFormatKeys); err != nil {
			errs = append(errs, field.Invalid(p.Child(key), *v, err.Error()))
		}
	}
	if err := checkTemplate(s.SlowSpawnMessage, []string{"seconds"}); err != nil {
		errs = append(errs, field.Invalid(p.Child("slow_spawn_message"), s.SlowSpawnMessage, err.Error()))
	}
	for _, label := range strings.Split(s.PodConnectIP, ".") {
		if strings.Contains(label, "{") {
			if err := checkTemplate(label, templateKeys); err != nil {
				errs = append(errs, field.Invalid(p.Child("pod_connect_ip"), s.PodConnectIP, err.Error()))
			}
		}
	}

	// Image and ports.
	if s.Image == "" {
		errs = append(errs, field.Required(p.Child("image"), ""))
	}
	if s.ImagePullPolicy != nil {
		switch *s.ImagePullPolicy {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		default:
			errs = append(errs, field.NotSupported(p.Child("image_pull_policy"), *s.ImagePullPolicy,
				[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
		}
	}
	if s.Port < 1 || s.Port > 65535 {
		errs = append(errs, field.Invalid(p.Child("port"), s.Port, "must be between 1 and 65535"))
	}
	if s.IP == "" {
		errs = append(errs, field.Required(p.Child("ip"), ""))
	}

	// Resources.
	errs = append(errs, validateCPU(s.CPULimit, p.Child("cpu_limit"))...)
	errs = append(errs, validateCPU(s.CPUGuarantee, p.Child("cpu_guarantee"))...)
	if s.CPULimit != nil && s.CPUGuarantee != nil && *s.CPULimit > 0 && *s.CPUGuarantee > *s.CPULimit {
		errs = append(errs, field.Invalid(p.Child("cpu_guarantee"), *s.CPUGuarantee, "must not exceed cpu_limit"))
	}
	if s.MemLimit > 0 && s.MemGuarantee > s.MemLimit {
		errs = append(errs, field.Invalid(p.Child("mem_guarantee"), int64(s.MemGuarantee), "must not exceed mem_limit"))
	}
	limits := validateResources(s.ExtraResourceLimits, p.Child("extra_resource_limits"), &errs)
	requests := validateResources(s.ExtraResourceGuarantees, p.Child("extra_resource_guarantees"), &errs)
	for _, name := range sortedKeys(requests) {
		r := requests[name]
		if l, ok := limits[name]; ok && r.Cmp(l) > 0 {
			errs = append(errs, field.Invalid(p.Child("extra_resource_guarantees").Key(name), s.ExtraResourceGuarantees[name], "must not exceed extra_resource_limits"))
		}
	}

	// Labels and annotations.
	for key, m := range map[string]map[string]string{
		"common_labels":         s.CommonLabels,
		"extra_labels":          s.ExtraLabels,
		"storage_extra_labels":  s.StorageExtraLabels,
		"user_namespace_labels": s.UserNamespaceLabels,
		"node_selector":         s.NodeSelector,
	} {
		errs = append(errs, validateLabels(m, p.Child(key))...)
	}
	for key, m := range map[string]map[string]string{
		"extra_annotations":          s.ExtraAnnotations,
		"storage_extra_annotations":  s.StorageExtraAnnotations,
		"user_namespace_annotations": s.UserNamespaceAnnotations,
	} {
		for _, k := range sortedKeys(m) {
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(p.Child(key).Key(k), k, msg))
			}
		}
	}
	for key, v := range map[string]string{
		"component_label": s.ComponentLabel,
		"course":          s.Course,
		"gpu_class":       s.GPUClass,
	} {
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(p.Child(key), v, msg))
		}
	}
	if s.ComponentLabel == "" {
		errs = append(errs, field.Required(p.Child("component_label"), "it selects the spawner's pods"))
	}

	// Storage.
	for i, m := range s.StorageAccessModes {
		switch m {
		case corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
		default:
			errs = append(errs, field.NotSupported(p.Child("storage_access_modes").Index(i), m,
				[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod}))
		}
	}
	if s.StorageCapacity != "" {
		if _, err := resource.ParseQuantity(s.StorageCapacity); err != nil {
			errs = append(errs, field.Invalid(p.Child("storage_capacity"), s.StorageCapacity, err.Error()))
		}
	}
	if s.StoragePVCEnsure {
		if s.StorageCapacity == "" {
			errs = append(errs, field.Required(p.Child("storage_capacity"), "needed with storage_pvc_ensure"))
		}
		if len(s.StorageAccessModes) == 0 {
			errs = append(errs, field.Required(p.Child("storage_access_modes"), "needed with storage_pvc_ensure"))
		}
	}

	// Names and identities.
	for _, msg := range validation.IsDNS1123Label(s.Namespace) {
		errs = append(errs, field.Invalid(p.Child("namespace"), s.Namespace, msg))
	}
	if s.HubNamespace != "" {
		for _, msg := range validation.IsDNS1123Label(s.HubNamespace) {
			errs = append(errs, field.Invalid(p.Child("hub_namespace"), s.HubNamespace, msg))
		}
	}
	switch s.SlugScheme {
	case SlugSchemeSafe, SlugSchemeEscape:
	default:
		errs = append(errs, field.NotSupported(p.Child("slug_scheme"), s.SlugScheme, []string{SlugSchemeSafe, SlugSchemeEscape}))
	}
	for key, v := range map[string]string{
		"priority_class_name": s.PriorityClassName,
		"scheduler_name":      s.SchedulerName,
	} {
		if v == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(v) {
			errs = append(errs, field.Invalid(p.Child(key), v, msg))
		}
	}
	if s.ServiceAccount != nil && *s.ServiceAccount != "" && !hasFields(*s.ServiceAccount) {
		for _, msg := range validation.IsDNS1123Subdomain(*s.ServiceAccount) {
			errs = append(errs, field.Invalid(p.Child("service_account"), *s.ServiceAccount, msg))
		}
	}
	for key, v := range map[string]*int64{"uid": s.UID, "gid": s.GID, "fs_gid": s.FSGID} {
		if v != nil && *v < 0 {
			errs = append(errs, field.Invalid(p.Child(key), *v, "must not be negative"))
		}
	}
	for i, g := range s.SupplementalGIDs {
		if g < 0 {
			errs = append(errs, field.Invalid(p.Child("supplemental_gids").Index(i), g, "must not be negative"))
		}
	}

	// Timings.
	for key, v := range map[string]int{
		"start_timeout":                 s.StartTimeout,
		"reservation_wait_timeout":      s.ReservationWaitTimeout,
		"k8s_api_request_timeout":       s.K8sAPIRequestTimeout,
		"k8s_api_request_retry_timeout": s.K8sAPIRequestRetryTimeout,
	} {
		if v <= 0 {
			errs = append(errs, field.Invalid(p.Child(key), v, "must be positive"))
		}
	}
	if s.DeleteGracePeriod < 0 {
		errs = append(errs, field.Invalid(p.Child("delete_grace_period"), s.DeleteGracePeriod, "must not be negative"))
	}
	if s.SlowSpawnMessageThreshold < 0 {
		errs = append(errs, field.Invalid(p.Child("slow_spawn_message_threshold"), s.SlowSpawnMessageThreshold, "must not be negative (0 disables the message)"))
	}
	if s.SlowSpawnMessageThreshold > 0 && s.SlowSpawnMessageFrequency <= 0 {
		errs = append(errs, field.Invalid(p.Child("slow_spawn_message_frequency"), s.SlowSpawnMessageFrequency, "must be positive"))
	}

	// Map iteration above is unordered; report in path order.
	sortErrors(errs)
	return errs
}

func validateCPU(v *float64, p *field.Path) field.ErrorList {
	if v != nil && *v < 0 {
		return field.ErrorList{field.Invalid(p, *v, "must not be negative")}
	}
	return nil
}

func validateResources(m map[string]string, p *field.Path, errs *field.ErrorList) map[string]resource.Quantity {
	out := make(map[string]resource.Quantity, len(m))
	for _, k := range sortedKeys(m) {
		for _, msg := range validation.IsQualifiedName(k) {
			*errs = append(*errs, field.Invalid(p.Key(k), k, "resource name: "+msg))
		}
		q, err := resource.ParseQuantity(m[k])
		if err != nil {
			*errs = append(*errs, field.Invalid(p.Key(k), m[k], err.Error()))
			continue
		}
		out[k] = q
	}
	return out
}

// validateLabels checks label keys, and values that are not templates
// (templated values are checked once expanded, when objects are built).
func validateLabels(m map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p.Key(k), k, "label key: "+msg))
		}
		if v := m[k]; !hasFields(v) {
			for _, msg := range validation.IsValidLabelValue(v) {
				errs = append(errs, field.Invalid(p.Key(k), v, msg))
			}
		}
	}
	return errs
}

func sortErrors(errs field.ErrorList) {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Field < errs[j].Field })
}
