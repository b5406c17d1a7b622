package spawner

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// sparkConfig is a course with a Spark profile whose worker count is a
// profile option, beside a plain profile.
const sparkConfig = `
kubespawner:
  namespace: dsc102
  course: DSC102
  cpu_guarantee: 0.5
  mem_guarantee: 1G
  profile_list:
  - display_name: Spark
    slug: spark
    kubespawner_override:
      spark:
        image: example/spark:3.5
        master: {cpu: 0.5, memory: 1G}
        worker: {cpu: 2, memory: 4G}
        workers: {default: 2, max: 6}
        conf: {spark.executor.memory: 2g, spark.sql.shuffle.partitions: 8, spark.eventLog.enabled: true}
    profile_options:
      size:
        display_name: Cluster size
        choices:
          small: {display_name: Small}
          large:
            display_name: Large
            kubespawner_override: {spark: {workers: {default: 5}, worker: {cpu: 4}}}
        unlisted_choice:
          enabled: true
          kubespawner_override: {spark: {workers: {default: "{value}"}}}
  - display_name: Plain
    slug: plain
`

func TestSparkTraitDecode(t *testing.T) {
	cfg := mustParse(t, sparkConfig)
	tests := map[string]struct {
		opts map[string]any
		want SparkSpec
	}{
		"profile with its default choice": {
			opts: map[string]any{"profile": "spark"},
			want: SparkSpec{Image: "example/spark:3.5",
				Master:  SparkRole{CPU: 0.5, Memory: 1 << 30},
				Worker:  SparkRole{CPU: 2, Memory: 4 << 30},
				Workers: SparkWorkers{Default: 2, Min: 1, Max: 6},
				Conf:    map[string]string{"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "8", "spark.eventLog.enabled": "true"},
				enabled: true},
		},
		"a choice merges into the profile's dict": {
			opts: map[string]any{"profile": "spark", "size": "large"},
			want: SparkSpec{Image: "example/spark:3.5",
				Master:  SparkRole{CPU: 0.5, Memory: 1 << 30},
				Worker:  SparkRole{CPU: 4, Memory: 4 << 30},
				Workers: SparkWorkers{Default: 5, Min: 1, Max: 6},
				Conf:    map[string]string{"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "8", "spark.eventLog.enabled": "true"},
				enabled: true},
		},
		"no spark trait": {opts: map[string]any{"profile": "plain"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := cfg.Resolve(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.Spark, tc.want) {
				t.Errorf("spark = %+v, want %+v", s.Spark, tc.want)
			}
			if s.Spark.Enabled() != tc.want.enabled {
				t.Errorf("Enabled() = %v", s.Spark.Enabled())
			}
		})
	}
}

func TestSparkWorkersDefaults(t *testing.T) {
	tests := map[string]struct {
		workers string
		want    SparkWorkers
	}{
		"absent":           {"", SparkWorkers{Default: 2, Min: 1, Max: 2}},
		"a fixed count":    {"workers: 3", SparkWorkers{Default: 3, Min: 3, Max: 3}},
		"only max":         {"workers: {max: 8}", SparkWorkers{Default: 2, Min: 1, Max: 8}},
		"max below 2":      {"workers: {max: 1}", SparkWorkers{Default: 1, Min: 1, Max: 1}},
		"only min":         {"workers: {min: 4}", SparkWorkers{Default: 4, Min: 4, Max: 4}},
		"default and max":  {"workers: {default: 3, max: 5}", SparkWorkers{Default: 3, Min: 1, Max: 5}},
		"numbers as texts": {`workers: {default: "3", max: "5"}`, SparkWorkers{Default: 3, Min: 1, Max: 5}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := mustParse(t, "kubespawner:\n  spark: {"+tc.workers+"}\n")
			if got := cfg.KubeSpawner.Spark.Workers; got != tc.want {
				t.Errorf("workers = %+v, want %+v", got, tc.want)
			}
			if got := cfg.KubeSpawner.Spark; got.Image != DefaultSparkImage || got.Master.Memory != DefaultSparkMasterMem || got.Worker.CPU != DefaultSparkWorkerCPU {
				t.Errorf("defaults not applied: %+v", got)
			}
		})
	}
}

func TestSparkTraitErrors(t *testing.T) {
	tests := map[string]struct {
		yaml       string
		wantFields []string
	}{
		"not a dict": {"kubespawner:\n  spark: yes\n", []string{"kubespawner.spark"}},
		"unknown keys": {"kubespawner:\n  spark: {image: a, nodes: 3, master: {gpu: 1}, workers: {count: 2}}\n",
			[]string{"kubespawner.spark.master.gpu", "kubespawner.spark.nodes", "kubespawner.spark.workers.count"}},
		"bad sizes": {"kubespawner:\n  spark: {master: {cpu: 0, memory: 100M}, worker: {cpu: lots, memory: 2Q}}\n",
			[]string{"kubespawner.spark.master.cpu", "kubespawner.spark.master.memory", "kubespawner.spark.worker.cpu", "kubespawner.spark.worker.memory"}},
		"worker too small for the daemon": {"kubespawner:\n  spark: {worker: {memory: 512M}}\n", []string{"kubespawner.spark.worker.memory"}},
		"empty image":                     {"kubespawner:\n  spark: {image: \"\"}\n", []string{"kubespawner.spark.image"}},
		"empty cmd":                       {"kubespawner:\n  spark: {worker: {cmd: []}}\n", []string{"kubespawner.spark.worker.cmd"}},
		"default above max":               {"kubespawner:\n  spark: {workers: {default: 5, max: 4}}\n", []string{"kubespawner.spark.workers.max"}},
		"default below min":               {"kubespawner:\n  spark: {workers: {default: 1, min: 2}}\n", []string{"kubespawner.spark.workers.default"}},
		"no workers":                      {"kubespawner:\n  spark: {workers: 0}\n", []string{"kubespawner.spark.workers.min"}},
		"too many workers":                {"kubespawner:\n  spark: {workers: {max: 65}}\n", []string{"kubespawner.spark.workers.max"}},
		"fractional count":                {"kubespawner:\n  spark: {workers: 2.5}\n", []string{"kubespawner.spark.workers"}},
		"conf keys and values": {"kubespawner:\n  spark:\n    conf: {executor.memory: 1g, spark.master: local, \"spark.a b\": x, spark.ok: [1], spark.nl: \"a\\nb\"}\n",
			[]string{"kubespawner.spark.conf[executor.memory]", "kubespawner.spark.conf[spark.a b]", "kubespawner.spark.conf[spark.master]",
				"kubespawner.spark.conf[spark.nl]", "kubespawner.spark.conf[spark.ok]"}},
		"blamed on the profile that sets it": {`
kubespawner:
  profile_list:
  - display_name: A
    kubespawner_override: {spark: {workers: {default: 9, max: 4}}}
`, []string{"kubespawner.profile_list[0].kubespawner_override.spark.workers.max"}},
		"blamed on the choice that breaks the merge": {`
kubespawner:
  profile_list:
  - display_name: A
    kubespawner_override: {spark: {workers: {max: 4}}}
    profile_options:
      size:
        choices:
          small: {display_name: S}
          huge: {display_name: H, kubespawner_override: {spark: {workers: {default: 8}}}}
`, []string{"kubespawner.profile_list[0].profile_options.size.choices.huge.kubespawner_override.spark.workers.max"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("Parse: want an error")
			}
			if got := errorFields(t, err); !reflect.DeepEqual(got, tc.wantFields) {
				t.Errorf("error fields = %q, want %q\n%v", got, tc.wantFields, err)
			}
		})
	}
}

func TestSparkWorkersOption(t *testing.T) {
	cfg := mustParse(t, sparkConfig)
	tests := map[string]struct {
		opts      map[string]any
		want      int
		wantField string
	}{
		"default":                   {opts: map[string]any{"profile": "spark"}, want: 2},
		"chosen, as the API sends":  {opts: map[string]any{"profile": "spark", "spark_workers": "4"}, want: 4},
		"chosen, as a JSON number":  {opts: map[string]any{"profile": "spark", "spark_workers": 6.0}, want: 6},
		"chosen, as the form sends": {opts: map[string]any{"profile": "spark", "spark_workers": []any{"1"}}, want: 1},
		"from the choice":           {opts: map[string]any{"profile": "spark", "size": "large"}, want: 5},
		"from free text":            {opts: map[string]any{"profile": "spark", "size--unlisted-choice": "3"}, want: 3},
		"above max":                 {opts: map[string]any{"profile": "spark", "spark_workers": "7"}, wantField: "user_options.spark_workers"},
		"below min":                 {opts: map[string]any{"profile": "spark", "spark_workers": 0.0}, wantField: "user_options.spark_workers"},
		"not a number":              {opts: map[string]any{"profile": "spark", "spark_workers": "many"}, wantField: "user_options.spark_workers"},
		"fraction":                  {opts: map[string]any{"profile": "spark", "spark_workers": 2.5}, wantField: "user_options.spark_workers"},
		"free text above max":       {opts: map[string]any{"profile": "spark", "size--unlisted-choice": "9"}, wantField: "user_options.size--unlisted-choice"},
		"no cluster in the profile": {opts: map[string]any{"profile": "plain", "spark_workers": "2"}, wantField: "user_options.spark_workers"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, s, err := Build(cfg, Request{User: "alice", UserOptions: tc.opts})
			var c *SparkCluster
			if err == nil {
				c, err = BuildSpark(s, Request{User: "alice", UserOptions: tc.opts}, objs.Pod)
			}
			if tc.wantField != "" {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantField {
					t.Fatalf("err = %v, want a FieldError for %s", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Workers != tc.want || *c.Worker.Spec.Replicas != int32(tc.want) {
				t.Errorf("workers = %d (replicas %d), want %d", c.Workers, *c.Worker.Spec.Replicas, tc.want)
			}
		})
	}
}

func TestBuildSpark(t *testing.T) {
	cfg := mustParse(t, sparkConfig)
	req := Request{User: "Jane.Doe@ucsd.edu", Server: "lab 1", Env: hubEnv("Jane.Doe@ucsd.edu", "lab 1"), UserOptions: map[string]any{"profile": "spark"}}
	objs, s, err := Build(cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	c, err := BuildSpark(s, req, objs.Pod)
	if err != nil {
		t.Fatal(err)
	}
	pod := objs.Pod
	if c.ID != pod.Name || c.Namespace != "dsc102" {
		t.Errorf("cluster id %q namespace %q, want the pod's name %q in dsc102", c.ID, c.Namespace, pod.Name)
	}

	// Every object: the hub's labels, the platform's, the cluster's; the
	// raw names in annotations; never the notebook's component.
	for _, o := range c.Objects() {
		l := o.GetLabels()
		for k, want := range map[string]string{
			LabelUser: pod.Labels[LabelUser], LabelCourse: "DSC102", LabelUsername: pod.Labels[LabelUsername],
			LabelServername: pod.Labels[LabelServername], "app": "jupyterhub", LabelSparkCluster: c.ID,
		} {
			if l[k] != want {
				t.Errorf("%s: label %s = %q, want %q", o.GetName(), k, l[k], want)
			}
		}
		if l[LabelComponent] == DefaultComponentLabel {
			t.Errorf("%s carries the notebook's component label", o.GetName())
		}
		if a := o.GetAnnotations(); a[AnnotationSpawnerUser] != req.User || a[AnnotationSpawnerServer] != req.Server {
			t.Errorf("%s annotations %v, want the raw user and server", o.GetName(), a)
		}
		if o.GetNamespace() != "dsc102" {
			t.Errorf("%s in namespace %q", o.GetName(), o.GetNamespace())
		}
	}
	names := []string{c.ConfigMap.Name, c.Service.Name, c.Master.Name, c.Worker.Name}
	if want := []string{"spark-conf", "spark-master-svc", "spark-master", "spark-worker"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names = %q, want %q", names, want)
	}

	// The Service selects the master pods, which its Deployment makes.
	tmpl := c.Master.Spec.Template
	for k, v := range c.Service.Spec.Selector {
		if tmpl.Labels[k] != v || c.Master.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("service selector %s=%s does not match the master's template and selector", k, v)
		}
	}
	if c.Worker.Spec.Template.Labels[LabelComponent] != SparkWorkerComponent || tmpl.Labels[LabelComponent] != SparkMasterComponent {
		t.Errorf("components: master %q worker %q", tmpl.Labels[LabelComponent], c.Worker.Spec.Template.Labels[LabelComponent])
	}
	if tmpl.Labels[LabelCourse] != "DSC102" || tmpl.Labels[LabelUser] != pod.Labels[LabelUser] {
		t.Errorf("master template lacks the labels the platform mounts the workspace by: %v", tmpl.Labels)
	}

	// Sizes are requests and limits; the worker offers its size to Spark.
	w := c.Worker.Spec.Template.Spec.Containers[0]
	if w.Resources.Requests.Cpu().String() != "2" || w.Resources.Limits.Memory().String() != "4Gi" || w.Image != "example/spark:3.5" {
		t.Errorf("worker container resources %v image %s", w.Resources, w.Image)
	}
	env := map[string]string{}
	for _, e := range w.Env {
		env[e.Name] = e.Value
	}
	if env["SPARK_WORKER_CORES"] != "2" || env["SPARK_WORKER_MEMORY"] != "3584m" || env[EnvSparkMasterURL] != SparkMasterURL {
		t.Errorf("worker env %v", env)
	}
	if got := w.Args[len(w.Args)-1]; got != "$(SPARK_MASTER_URL)" {
		t.Errorf("worker args %q, want the master's URL last", w.Args)
	}
	if spec := c.Worker.Spec.Template.Spec; *spec.TerminationGracePeriodSeconds != s.DeleteGracePeriod || *spec.AutomountServiceAccountToken || *spec.EnableServiceLinks {
		t.Errorf("worker pod spec: grace %d automount %v service links %v", *spec.TerminationGracePeriodSeconds, *spec.AutomountServiceAccountToken, *spec.EnableServiceLinks)
	}

	if conf := c.ConfigMap.Data[SparkConfFile]; conf != "spark.master spark://spark-master-svc:7077\nspark.eventLog.enabled true\nspark.executor.memory 2g\nspark.sql.shuffle.partitions 8\n" {
		t.Errorf("spark-defaults.conf = %q", conf)
	}

	// The notebook points at the cluster.
	nb := pod.Spec.Containers[0]
	got := map[string]string{}
	for _, e := range nb.Env {
		got[e.Name] = e.Value
	}
	if got[EnvSparkMasterURL] != SparkMasterURL || got[EnvSparkMasterUIURL] != SparkMasterUIURL || got["SPARK_CONF_DIR"] != SparkConfDir {
		t.Errorf("notebook env %v", got)
	}
	mounted := false
	for _, m := range nb.VolumeMounts {
		mounted = mounted || m.MountPath == SparkConfDir
	}
	if !mounted || pod.Spec.Volumes[len(pod.Spec.Volumes)-1].ConfigMap.Name != SparkConfigMapName {
		t.Errorf("spark-defaults.conf not mounted in the notebook: %v %v", nb.VolumeMounts, pod.Spec.Volumes)
	}
	if pod.Labels[LabelComponent] != DefaultComponentLabel {
		t.Errorf("the notebook pod's component changed: %v", pod.Labels)
	}
}

func TestSparkEnvReplacesSameNames(t *testing.T) {
	cfg := mustParse(t, "kubespawner:\n  environment: {SPARK_MASTER_URL: local, KEEP: x}\n  spark: {}\n")
	objs, s, err := Build(cfg, Request{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BuildSpark(s, Request{User: "alice"}, objs.Pod); err != nil {
		t.Fatal(err)
	}
	var urls []string
	keep := false
	for _, e := range objs.Pod.Spec.Containers[0].Env {
		if e.Name == EnvSparkMasterURL {
			urls = append(urls, e.Value)
		}
		keep = keep || e.Name == "KEEP"
	}
	if !reflect.DeepEqual(urls, []string{SparkMasterURL}) || !keep {
		t.Errorf("SPARK_MASTER_URL values %q (KEEP kept %v), want only the cluster's", urls, keep)
	}
}

func TestSparkClusterID(t *testing.T) {
	if got := SparkClusterID("jupyter-alice"); got != "jupyter-alice" {
		t.Errorf("SparkClusterID(jupyter-alice) = %q", got)
	}
	long := "jupyter-" + strings.Repeat("x", 70)
	got := SparkClusterID(long)
	if !IsValidLabelValue(got) || got == SparkClusterID(long+"y") {
		t.Errorf("SparkClusterID(long) = %q: want a valid label value that tells names apart", got)
	}
}

func TestUsesSpark(t *testing.T) {
	tests := map[string]struct {
		yaml string
		want bool
	}{
		"none":     {"kubespawner: {image: a}\n", false},
		"base":     {"kubespawner:\n  spark: {}\n", true},
		"profile":  {"kubespawner:\n  profile_list: [{display_name: A, kubespawner_override: {spark: {}}}]\n", true},
		"disabled": {"kubespawner:\n  profile_list: [{display_name: A, kubespawner_override: {spark: null}}]\n", false},
		"choice": {`
kubespawner:
  profile_list:
  - display_name: A
    profile_options: {o: {choices: {c: {kubespawner_override: {spark: {workers: 1}}}}}}
`, true},
		"unlisted choice": {`
kubespawner:
  profile_list:
  - display_name: A
    profile_options: {o: {unlisted_choice: {enabled: true, kubespawner_override: {spark: {workers: "{value}"}}}}}
`, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := mustParse(t, tc.yaml).UsesSpark(); got != tc.want {
				t.Errorf("UsesSpark() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRenderAll(t *testing.T) {
	cfg := mustParse(t, sparkConfig)
	req := Request{User: "alice", Env: hubEnv("alice", ""), UserOptions: map[string]any{"profile": "spark", "spark_workers": "3"}}
	out, err := RenderAll(cfg, req)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "\n---\n")
	var kinds []string
	for _, d := range docs {
		for _, line := range strings.Split(d, "\n") {
			if k, ok := strings.CutPrefix(line, "kind: "); ok {
				kinds = append(kinds, k)
			}
		}
	}
	if want := []string{"Pod", "ConfigMap", "Service", "Deployment", "Deployment"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("rendered kinds %q, want %q", kinds, want)
	}
	for _, want := range []string{"replicas: 3", "name: SPARK_MASTER_URL", "spark.master spark://spark-master-svc:7077"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("render lacks %q", want)
		}
	}
	if strings.Contains(string(out), "creationTimestamp") || strings.Contains(string(out), "status:") {
		t.Errorf("render carries empty creationTimestamp or status fields:\n%s", out)
	}

	// Without a cluster it is exactly Render.
	plain := Request{User: "alice", Env: hubEnv("alice", ""), UserOptions: map[string]any{"profile": "plain"}}
	a, err := RenderAll(cfg, plain)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(cfg, plain)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("RenderAll differs from Render for a plain profile:\n%s", lineDiff(string(b), string(a)))
	}
}
