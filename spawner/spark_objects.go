package spawner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Names, ports and labels of a Spark cluster. The names are fixed because
// the platform documents the master's address as
// spark://spark-master-svc:7077; a namespace therefore holds one cluster,
// which is what a namespace per account gives.
const (
	SparkMasterName    = "spark-master"
	SparkWorkerName    = "spark-worker"
	SparkServiceName   = "spark-master-svc"
	SparkConfigMapName = "spark-conf"
	SparkMasterPort    = 7077
	SparkMasterUIPort  = 8080
	SparkWorkerUIPort  = 8081
	// SparkMasterURL is where jobs are submitted, from any pod of the namespace.
	SparkMasterURL = "spark://spark-master-svc:7077"
	// SparkMasterUIURL is the master's web UI.
	SparkMasterUIURL = "http://spark-master-svc:8080"

	// SparkMasterComponent and SparkWorkerComponent are the component
	// labels of the Spark pods. They are never component_label, so the
	// notebook watcher does not take Spark pods for servers.
	SparkMasterComponent = "spark-master"
	SparkWorkerComponent = "spark-worker"
	// LabelSparkCluster ties every object of a cluster to its server; its
	// value is SparkClusterID of the notebook pod's name.
	LabelSparkCluster = "spawner.dsmlp.io/spark-cluster"

	// SparkConfDir holds spark-defaults.conf in the notebook and in every
	// pod of the cluster (SPARK_CONF_DIR).
	SparkConfDir = "/etc/spark/conf"
	// SparkConfFile is the ConfigMap key mounted there.
	SparkConfFile = "spark-defaults.conf"

	// EnvSparkMasterURL and EnvSparkMasterUIURL point the notebook at the
	// cluster.
	EnvSparkMasterURL   = "SPARK_MASTER_URL"
	EnvSparkMasterUIURL = "SPARK_MASTER_WEBUI_URL"

	sparkConfVolume = "spawner-spark-conf"
	sparkClass      = "/opt/spark/bin/spark-class"
	// sparkDaemonHeap is the worker daemon's own heap; the rest of a
	// worker's memory, less JVM overhead, is offered to executors.
	sparkDaemonHeap     = 256 << 20
	sparkWorkerOverhead = 512 << 20
)

// SparkCluster is what a spawn with the spark trait creates besides the
// notebook, in creation order: ConfigMap, Service, master and workers. The
// caller makes the notebook pod the owner of each, which Build cannot.
type SparkCluster struct {
	// ID is the LabelSparkCluster value.
	ID        string
	Namespace string
	// Workers is the worker count of this spawn.
	Workers int
	// Spec is the effective spark trait.
	Spec      SparkSpec
	ConfigMap *corev1.ConfigMap
	Service   *corev1.Service
	Master    *appsv1.Deployment
	Worker    *appsv1.Deployment
}

// SparkClusterID is the LabelSparkCluster value of the server whose
// notebook pod is podName: the name itself when it is a valid label value.
func SparkClusterID(podName string) string {
	if IsValidLabelValue(podName) {
		return podName
	}
	return mustSafeSlug(podName, IsValidLabelValue, 63)
}

// BuildSpark returns the Spark cluster the settings declare for req (nil if
// none) and points the notebook pod at it: the master's address in
// SPARK_MASTER_URL and SPARK_MASTER_WEBUI_URL, and spark-defaults.conf
// mounted at SparkConfDir. The worker count comes from the spark_workers
// user option; a bad one yields a *FieldError.
func BuildSpark(s *Settings, req Request, pod *corev1.Pod) (*SparkCluster, error) {
	workers, err := sparkWorkers(&s.Spark, req.UserOptions)
	if err != nil || !s.Spark.Enabled() {
		return nil, err
	}
	b := &builder{s: s, n: &Names{Namespace: pod.Namespace}, req: req}
	c := &SparkCluster{ID: SparkClusterID(pod.Name), Namespace: pod.Namespace, Workers: workers, Spec: s.Spark}
	c.ConfigMap = &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: b.meta(SparkConfigMapName, b.sparkLabels(c.ID, ""), b.annotations(nil)),
		Data:       map[string]string{SparkConfFile: sparkDefaults(s.Spark.Conf)},
	}
	c.Service = &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: b.meta(SparkServiceName, b.sparkLabels(c.ID, SparkMasterComponent), b.annotations(nil)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: sparkSelector(c.ID, SparkMasterComponent),
			Ports: []corev1.ServicePort{
				{Name: "spark", Port: SparkMasterPort, TargetPort: intstr.FromString("spark")},
				{Name: "http", Port: SparkMasterUIPort, TargetPort: intstr.FromString("http")},
			},
		},
	}
	master := s.Spark.Master
	c.Master = b.sparkDeployment(c.ID, SparkMasterName, SparkMasterComponent, 1, master,
		[]string{sparkClass, "org.apache.spark.deploy.master.Master"},
		[]corev1.EnvVar{
			{Name: "SPARK_MASTER_PORT", Value: strconv.Itoa(SparkMasterPort)},
			{Name: "SPARK_MASTER_WEBUI_PORT", Value: strconv.Itoa(SparkMasterUIPort)},
			{Name: "SPARK_DAEMON_MEMORY", Value: mebibytes(int64(master.Memory) - sparkDaemonHeap)},
		},
		[]corev1.ContainerPort{{Name: "spark", ContainerPort: SparkMasterPort}, {Name: "http", ContainerPort: SparkMasterUIPort}},
		"spark")
	worker := s.Spark.Worker
	c.Worker = b.sparkDeployment(c.ID, SparkWorkerName, SparkWorkerComponent, workers, worker,
		[]string{sparkClass, "org.apache.spark.deploy.worker.Worker", "$(" + EnvSparkMasterURL + ")"},
		[]corev1.EnvVar{
			{Name: EnvSparkMasterURL, Value: SparkMasterURL},
			{Name: "SPARK_WORKER_CORES", Value: strconv.Itoa(max(1, int(worker.CPU)))},
			{Name: "SPARK_WORKER_MEMORY", Value: mebibytes(int64(worker.Memory) - sparkWorkerOverhead)},
			{Name: "SPARK_WORKER_WEBUI_PORT", Value: strconv.Itoa(SparkWorkerUIPort)},
			{Name: "SPARK_DAEMON_MEMORY", Value: mebibytes(sparkDaemonHeap)},
		},
		[]corev1.ContainerPort{{Name: "http", ContainerPort: SparkWorkerUIPort}},
		"http")
	pointAtSpark(pod)
	return c, nil
}

// Objects returns the cluster's objects in creation order.
func (c *SparkCluster) Objects() []metav1.Object {
	return []metav1.Object{c.ConfigMap, c.Service, c.Master, c.Worker}
}

// sparkLabels are every cluster object's labels: the hub's (common_labels,
// user and server slugs), the platform's (dsmlp/user, dsmlp/course; the
// cluster mounts the workspace only with both), the cluster's, and the
// component, which is never component_label.
func (b *builder) sparkLabels(id, component string) map[string]string {
	l := b.commonLabels(nil)
	l[LabelServername] = labelSlug(b.req.Server)
	if component != "" {
		l[LabelComponent] = component
		l[LabelAppComponent] = component
	}
	l[LabelSparkCluster] = id
	return b.withPlatform(l, false)
}

func sparkSelector(id, component string) map[string]string {
	return map[string]string{LabelSparkCluster: id, LabelComponent: component}
}

func (b *builder) sparkDeployment(id, name, component string, replicas int, role SparkRole, args []string, env []corev1.EnvVar, ports []corev1.ContainerPort, probePort string) *appsv1.Deployment {
	s := b.s
	if len(role.Cmd) > 0 {
		args = append([]string(nil), role.Cmd...)
	}
	env = append([]corev1.EnvVar{
		podIPEnv("SPARK_LOCAL_HOSTNAME"),
		{Name: "SPARK_CONF_DIR", Value: SparkConfDir},
		{Name: "SPARK_NO_DAEMONIZE", Value: "true"},
	}, env...)
	size := corev1.ResourceList{
		corev1.ResourceCPU:    cpuQuantity(role.CPU),
		corev1.ResourceMemory: *resource.NewQuantity(int64(role.Memory), resource.BinarySI),
	}
	c := corev1.Container{
		Name:           component,
		Image:          s.Spark.Image,
		Args:           args,
		Env:            env,
		Ports:          ports,
		Resources:      corev1.ResourceRequirements{Requests: size, Limits: size.DeepCopy()},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(probePort)}}, PeriodSeconds: 5},
		VolumeMounts:   []corev1.VolumeMount{{Name: sparkConfVolume, MountPath: SparkConfDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
		},
	}
	if s.ImagePullPolicy != nil {
		c.ImagePullPolicy = *s.ImagePullPolicy
	}
	labels := b.sparkLabels(id, component)
	annotations := b.annotations(nil)
	grace := s.DeleteGracePeriod
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: b.meta(name, labels, annotations),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: sparkSelector(id, component)},
			// Recreate never runs old and new pods side by side, which the
			// namespace's quota would have to cover.
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			RevisionHistoryLimit: ptr(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					Containers:       []corev1.Container{c},
					Volumes:          []corev1.Volume{sparkConfVolumeSource()},
					ImagePullSecrets: s.ImagePullSecrets,
					// A stop deletes the cluster with the notebook's grace period.
					TerminationGracePeriodSeconds: &grace,
					PriorityClassName:             s.PriorityClassName,
					SchedulerName:                 s.SchedulerName,
					AutomountServiceAccountToken:  ptr(false),
					// Service links would put SPARK_MASTER_SVC_* variables in
					// the environment, close to Spark's own SPARK_MASTER_*.
					EnableServiceLinks: ptr(false),
				},
			},
		},
	}
}

func sparkConfVolumeSource() corev1.Volume {
	return corev1.Volume{Name: sparkConfVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: SparkConfigMapName}},
	}}
}

// podIPEnv makes Spark advertise the pod's IP rather than its host name,
// which other pods cannot resolve.
func podIPEnv(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"},
	}}
}

// pointAtSpark adds the cluster's address and configuration to the notebook
// container, replacing variables of the same names, and mounts
// spark-defaults.conf, so that a SparkSession in the notebook uses the
// cluster by default.
func pointAtSpark(pod *corev1.Pod) {
	add := []corev1.EnvVar{
		{Name: EnvSparkMasterURL, Value: SparkMasterURL},
		{Name: EnvSparkMasterUIURL, Value: SparkMasterUIURL},
		{Name: "SPARK_CONF_DIR", Value: SparkConfDir},
		podIPEnv("SPARK_LOCAL_HOSTNAME"),
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != ContainerName {
			continue
		}
		env := c.Env[:0:0]
		for _, e := range c.Env {
			if !slices.ContainsFunc(add, func(a corev1.EnvVar) bool { return a.Name == e.Name }) {
				env = append(env, e)
			}
		}
		c.Env = append(env, add...)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: sparkConfVolume, MountPath: SparkConfDir, ReadOnly: true})
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, sparkConfVolumeSource())
}

// sparkDefaults is spark-defaults.conf: the master, then conf by key.
func sparkDefaults(conf map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "spark.master %s\n", SparkMasterURL)
	for _, k := range sortedKeys(conf) {
		fmt.Fprintf(&b, "%s %s\n", k, conf[k])
	}
	return b.String()
}

// mebibytes formats a byte count as a JVM memory size ("768m"), at least 128m.
func mebibytes(n int64) string {
	return strconv.FormatInt(max(n>>20, 128), 10) + "m"
}

// RenderAll prints every object a spawn creates, as Render does, followed
// by the Spark cluster's (ConfigMap, Service, master, workers) when the
// settings declare one; the notebook pod then shows the cluster's address
// and configuration.
func RenderAll(cfg *Config, req Request) ([]byte, error) {
	objs, s, err := Build(cfg, req)
	if err != nil {
		return nil, err
	}
	c, err := BuildSpark(s, req, objs.Pod)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return Render(cfg, req)
	}
	return renderObjects(objs.Namespace, objs.PVC, objs.Pod, objs.Service, c.ConfigMap, c.Service, c.Master, c.Worker)
}

// dropNullTimestamps removes the empty creationTimestamp that the API types
// add to every metadata, pod templates' included.
func dropNullTimestamps(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for _, e := range t {
			dropNullTimestamps(e)
		}
	case []any:
		for _, e := range t {
			dropNullTimestamps(e)
		}
	}
}
