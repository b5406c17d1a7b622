package spawner

import "k8s.io/apimachinery/pkg/util/validation/field"

// refusal explains why spawnerd does not take a trait that KubeSpawner or
// JupyterHub's Spawner defines, and where to set it instead, so that a
// KubeSpawner configuration carried over is told what to move rather than
// "unknown key".
type refusal struct {
	// why is the message, a sentence fragment after "spawnerd cannot
	// honour it: ".
	why string
	// accepts, if set, reports a value that asks for exactly what spawnerd
	// does anyway; such a value is accepted and ignored.
	accepts func(v any) bool
}

// hubSide is the message for a JupyterHub Spawner trait that the hub process
// itself evaluates: the hub's RemoteKubeSpawner is a Spawner, so the trait
// works there unchanged.
func hubSide(trait, what string) refusal {
	return refusal{why: what + "; set c.Spawner." + trait + " in jupyterhub_config.py"}
}

// refusedTraits are the traits of KubeSpawner 7.1 (kubespawner/spawner.py)
// and of JupyterHub 3.0's Spawner (jupyterhub/spawner.py) that spawnerd does
// not take. Every other trait of the two classes is in Settings. It is
// computed once and never modified.
var refusedTraits = buildRefusals()

func buildRefusals() map[string]refusal {
	refused := map[string]refusal{
		// JupyterHub Spawner traits the hub evaluates.
		"pre_spawn_hook":              hubSide("pre_spawn_hook", "it is a Python hook the hub runs before start"),
		"post_stop_hook":              hubSide("post_stop_hook", "it is a Python hook the hub runs after stop"),
		"auth_state_hook":             hubSide("auth_state_hook", "it is a Python hook the hub runs with the user's auth_state"),
		"options_form":                hubSide("options_form", "the hub shows the spawn form (RemoteKubeSpawner renders profile_list by default)"),
		"options_from_form":           hubSide("options_from_form", "the hub turns the form into user_options"),
		"poll_interval":               hubSide("poll_interval", "the hub decides how often it polls"),
		"poll_jitter":                 hubSide("poll_jitter", "the hub decides how often it polls"),
		"http_timeout":                hubSide("http_timeout", "the hub waits for the server to answer after start"),
		"consecutive_failure_limit":   hubSide("consecutive_failure_limit", "the hub counts failed spawns"),
		"env_keep":                    hubSide("env_keep", "it copies variables from the hub process's environment, which the hub sends as env"),
		"hub_connect_url":             hubSide("hub_connect_url", "the hub builds JUPYTERHUB_API_URL from it and sends it as env"),
		"oauth_roles":                 hubSide("oauth_roles", "the hub registers the server's OAuth client"),
		"oauth_client_allowed_scopes": hubSide("oauth_client_allowed_scopes", "the hub registers the server's OAuth client"),
		"ssl_alt_names":               {why: "spawnerd does not support JupyterHub's internal_ssl, whose certificates these name"},
		"ssl_alt_names_include_local": {why: "spawnerd does not support JupyterHub's internal_ssl, whose certificates these name"},

		// KubeSpawner traits.
		"hub_connect_ip":             {why: "KubeSpawner deprecated it for JupyterHub.hub_connect_ip; set c.JupyterHub.hub_connect_url in jupyterhub_config.py"},
		"hub_connect_port":           {why: "KubeSpawner deprecated it for JupyterHub.hub_connect_port; set c.JupyterHub.hub_connect_url in jupyterhub_config.py"},
		"k8s_api_host":               {why: "spawnerd's own Kubernetes connection comes from spawnerd serve --kubeconfig (its server), else the in-cluster config"},
		"k8s_api_ssl_ca_cert":        {why: "spawnerd's own Kubernetes connection comes from spawnerd serve --kubeconfig (its certificate-authority), else the in-cluster config"},
		"k8s_api_verify_ssl":         {why: "spawnerd's own Kubernetes connection comes from spawnerd serve --kubeconfig (its insecure-skip-tls-verify), else the in-cluster config"},
		"k8s_api_threadpool_workers": {why: "it has had no effect since KubeSpawner 3.0; remove it"},
		"modify_pod_hook":            {why: "it is a Python hook, which spawnerd cannot run; express the change with extra_pod_config, extra_container_config or the other pod traits"},
		"after_pod_created_hook":     {why: "it is a Python hook, which spawnerd cannot run"},
		"get_pod_url":                {why: "it is a Python hook, which spawnerd cannot run; use pod_connect_ip or services_enabled"},
		"secret_name_template":       {why: "spawnerd does not support JupyterHub's internal_ssl, whose certificate secret this names"},
		"secret_mount_path":          {why: "spawnerd does not support JupyterHub's internal_ssl, whose certificate secret this mounts"},
		"profile_form_template": {why: "the hub's RemoteKubeSpawner renders the profile form itself; " +
			"to replace the form set c.Spawner.options_form in jupyterhub_config.py"},
		"additional_profile_form_template_paths": {why: "the hub's RemoteKubeSpawner renders the profile form itself; " +
			"to replace the form set c.Spawner.options_form in jupyterhub_config.py"},
		"handle_legacy_names": {
			why: "spawnerd never looks for a PVC named by KubeSpawner's pre-7 'escape' scheme (as with false); " +
				"set false, or set pvc_name_template to the legacy name",
			accepts: func(v any) bool { return v == false },
		},
	}

	// KubeSpawner 0.9 and 0.10 renamed these; it still moves their values
	// to the new names. Two names of the 0.9 list were fused by a missing
	// comma in its source, so singleuser_allow_privilege_escalation and
	// singleuser_lifecycle_hooks were never aliases and stay unknown.
	renamed := map[string]string{"image_spec": "image"}
	for _, n := range []string{
		"working_dir", "service_account", "extra_labels", "extra_annotations", "image_spec",
		"image_pull_policy", "image_pull_secrets", "node_selector", "uid", "fs_gid",
		"supplemental_gids", "privileged", "extra_pod_config", "init_containers",
		"extra_container_config", "extra_containers",
	} {
		renamed["singleuser_"+n] = n
	}
	for _, n := range []string{"class", "pvc_ensure", "capacity", "extra_labels", "access_modes"} {
		renamed["user_storage_"+n] = "storage_" + n
	}
	for old, n := range renamed {
		if n2, ok := renamed[n]; ok {
			n = n2 // singleuser_image_spec → image_spec → image
		}
		refused[old] = refusal{why: "KubeSpawner deprecated it; rename it to " + n}
	}
	return refused
}

// checkRefused reports a refused trait, or nil when key is not refused or v
// is a value the refusal accepts.
func checkRefused(key string, v any, p *field.Path) (refused bool, err *field.Error) {
	r, ok := refusedTraits[key]
	if !ok {
		return false, nil
	}
	if r.accepts != nil && r.accepts(v) {
		return true, nil
	}
	return true, field.Forbidden(p, "spawnerd cannot honour it: "+r.why)
}

// dropNulls returns a dict override's value without its null entries, at
// any depth: KubeSpawner's recursive_update deletes a key whose new value is
// None, so they are not values to check.
func dropNulls(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, e := range m {
		if e == nil {
			continue
		}
		out[k] = dropNulls(e)
	}
	return out
}
