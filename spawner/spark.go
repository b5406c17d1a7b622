package spawner

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SparkSpec is the spark trait: a Spark standalone cluster (a master and
// workers) started beside the notebook, as a course environment that is a
// cluster rather than a container. It is a platform addition, not a
// KubeSpawner trait. Null (the default) means no cluster; a dict declares
// one, and a profile's or choice's dict merges into it as dict traits do,
// so a choice can change only the worker count.
type SparkSpec struct {
	// Image runs the master and the workers. Default DefaultSparkImage.
	Image string
	// Master is the master pod's size and command. Default 1 CPU, 1G.
	Master SparkRole
	// Worker is each worker pod's size and command. Default 1 CPU, 2G.
	Worker SparkRole
	// Workers is how many workers there are and what a user may choose.
	Workers SparkWorkers
	// Conf are extra spark-defaults.conf properties ("spark.*" keys).
	Conf map[string]string

	enabled bool
}

// SparkRole sizes the master or a worker. CPU and Memory are both the
// request and the limit, so a cluster's share of the namespace's quota is
// known before it starts.
type SparkRole struct {
	// CPU is in cores.
	CPU float64
	// Memory is a KubeSpawner byte size ("2G" = 2 GiB).
	Memory ByteSize
	// Cmd replaces the container's args (the image's entrypoint stays);
	// nil runs the Spark class the apache/spark images ship.
	Cmd Command
}

// SparkWorkers is the worker count: Default unless the user asks, with the
// spark_workers user option, for a count from Min to Max.
type SparkWorkers struct {
	Default, Min, Max int
}

// Spark defaults and bounds.
const (
	DefaultSparkImage      = "apache/spark:3.5.3"
	DefaultSparkWorkers    = 2
	MaxSparkWorkers        = 64
	DefaultSparkMasterCPU  = 1.0
	DefaultSparkWorkerCPU  = 1.0
	DefaultSparkMasterMem  = ByteSize(1 << 30)
	DefaultSparkWorkerMem  = ByteSize(2 << 30)
	minSparkMasterMemory   = ByteSize(512 << 20)
	minSparkWorkerMemory   = ByteSize(1 << 30)
	sparkConfPrefix        = "spark."
	UserOptionSparkWorkers = "spark_workers"
)

// Enabled reports whether the settings declare a Spark cluster.
func (s *SparkSpec) Enabled() bool { return s != nil && s.enabled }

func (s *SparkSpec) decodeTrait(v any, p *field.Path) field.ErrorList {
	*s = SparkSpec{}
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{invalid(p, v, "must be a dict describing a Spark cluster, or null")}
	}
	*s = SparkSpec{
		Image:   DefaultSparkImage,
		Master:  SparkRole{CPU: DefaultSparkMasterCPU, Memory: DefaultSparkMasterMem},
		Worker:  SparkRole{CPU: DefaultSparkWorkerCPU, Memory: DefaultSparkWorkerMem},
		enabled: true,
	}
	var errs field.ErrorList
	var workers any
	for _, k := range sortedKeys(m) {
		kp := p.Child(k)
		switch k {
		case "image":
			img, ok := m[k].(string)
			if !ok || img == "" {
				errs = append(errs, invalid(kp, m[k], "must be a non-empty image name"))
			}
			s.Image = img
		case "master":
			errs = append(errs, s.Master.decode(m[k], kp, minSparkMasterMemory)...)
		case "worker":
			errs = append(errs, s.Worker.decode(m[k], kp, minSparkWorkerMemory)...)
		case "workers":
			workers = m[k]
		case "conf":
			s.Conf, errs = decodeSparkConf(m[k], kp, errs)
		default:
			errs = append(errs, field.Invalid(kp, field.OmitValueType{}, "unknown key (spark takes image, master, worker, workers, conf)"))
		}
	}
	return append(errs, s.Workers.decode(workers, p.Child("workers"))...)
}

func (r *SparkRole) decode(v any, p *field.Path, minMemory ByteSize) field.ErrorList {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return field.ErrorList{invalid(p, v, "must be a dict with cpu, memory and cmd")}
	}
	var errs field.ErrorList
	for _, k := range sortedKeys(m) {
		kp := p.Child(k)
		switch k {
		case "cpu":
			f, ok := number(m[k])
			if !ok || f <= 0 || math.IsInf(f, 0) {
				errs = append(errs, invalid(kp, m[k], "must be a positive number of cores"))
				continue
			}
			r.CPU = f
		case "memory":
			var b ByteSize
			if e := b.decodeTrait(m[k], kp); len(e) > 0 {
				errs = append(errs, e...)
				continue
			}
			if b < minMemory {
				errs = append(errs, invalid(kp, m[k], fmt.Sprintf("must be at least %dM, for the Spark daemon", minMemory>>20)))
				continue
			}
			r.Memory = b
		case "cmd":
			errs = append(errs, r.Cmd.decodeTrait(m[k], kp)...)
		default:
			errs = append(errs, field.Invalid(kp, field.OmitValueType{}, "unknown key (takes cpu, memory, cmd)"))
		}
	}
	return errs
}

// decode reads an integer (a fixed count) or {default, min, max}. Numbers
// may be strings, so an unlisted choice can set them from "{value}".
func (w *SparkWorkers) decode(v any, p *field.Path) field.ErrorList {
	var def, lo, hi *int
	var errs field.ErrorList
	count := func(v any, p *field.Path) *int {
		n, ok := integer(v)
		if !ok {
			errs = append(errs, invalid(p, v, "must be a whole number"))
			return nil
		}
		return &n
	}
	switch t := v.(type) {
	case nil:
	case map[string]any:
		for _, k := range sortedKeys(t) {
			switch k {
			case "default":
				def = count(t[k], p.Child(k))
			case "min":
				lo = count(t[k], p.Child(k))
			case "max":
				hi = count(t[k], p.Child(k))
			default:
				errs = append(errs, field.Invalid(p.Child(k), field.OmitValueType{}, "unknown key (takes default, min, max)"))
			}
		}
	default:
		if n := count(v, p); n != nil {
			def, lo, hi = n, n, n
		}
	}
	if len(errs) > 0 {
		return errs
	}
	w.Min = 1
	if lo != nil {
		w.Min = *lo
	}
	switch {
	case def != nil:
		w.Default = *def
	case hi != nil:
		w.Default = min(max(DefaultSparkWorkers, w.Min), *hi)
	default:
		w.Default = max(DefaultSparkWorkers, w.Min)
	}
	w.Max = max(w.Default, w.Min)
	if hi != nil {
		w.Max = *hi
	}
	switch {
	case w.Min < 1:
		errs = append(errs, field.Invalid(p.Child("min"), w.Min, "must be at least 1"))
	case w.Default < w.Min:
		errs = append(errs, field.Invalid(p.Child("default"), w.Default, fmt.Sprintf("must not be below min (%d)", w.Min)))
	case w.Max < w.Default:
		errs = append(errs, field.Invalid(p.Child("max"), w.Max, fmt.Sprintf("must not be below default (%d)", w.Default)))
	case w.Max > MaxSparkWorkers:
		errs = append(errs, field.Invalid(p.Child("max"), w.Max, fmt.Sprintf("must be at most %d", MaxSparkWorkers)))
	}
	return errs
}

// decodeSparkConf reads spark-defaults.conf properties. Keys must be Spark
// properties (Spark ignores others there) and neither may break the file's
// one-property-per-line format.
func decodeSparkConf(v any, p *field.Path, errs field.ErrorList) (map[string]string, field.ErrorList) {
	if v == nil {
		return nil, errs
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, append(errs, invalid(p, v, "must be a dict of Spark properties"))
	}
	out := make(map[string]string, len(m))
	for _, k := range sortedKeys(m) {
		kp := p.Key(k)
		switch {
		case !strings.HasPrefix(k, sparkConfPrefix) || strings.ContainsAny(k, " \t\r\n=:"):
			errs = append(errs, field.Invalid(kp, k, "must be a Spark property name (spark.*, no spaces)"))
			continue
		case k == "spark.master":
			errs = append(errs, field.Forbidden(kp, "set by the cluster to "+SparkMasterURL))
			continue
		}
		var s string
		switch t := m[k].(type) {
		case string:
			s = t
		case json.Number:
			s = t.String()
		case bool:
			s = strconv.FormatBool(t)
		default:
			errs = append(errs, invalid(kp, m[k], "must be a string, number or boolean"))
			continue
		}
		if strings.ContainsAny(s, "\r\n") {
			errs = append(errs, field.Invalid(kp, s, "must be on one line"))
			continue
		}
		out[k] = s
	}
	return out, errs
}

func number(v any) (float64, bool) {
	switch t := v.(type) {
	case json.Number:
		f, err := t.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
		return f, err == nil
	}
	return 0, false
}

func integer(v any) (int, bool) {
	var s string
	switch t := v.(type) {
	case json.Number:
		s = t.String()
	case string:
		s = strings.TrimSpace(t)
	default:
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// sparkWorkers returns the worker count the user asked for with the
// spark_workers option, or the default; values outside min..max and a
// count for a profile without a cluster are bad input.
func sparkWorkers(spec *SparkSpec, userOptions map[string]any) (int, error) {
	v, given := userOptions[UserOptionSparkWorkers]
	if !given || v == nil {
		if spec.Enabled() {
			return spec.Workers.Default, nil
		}
		return 0, nil
	}
	fieldName := "user_options." + UserOptionSparkWorkers
	if !spec.Enabled() {
		return 0, &FieldError{Field: fieldName, Message: "this profile has no Spark cluster"}
	}
	if l, ok := v.([]any); ok && len(l) == 1 { // the options form sends lists
		v = l[0]
	}
	var n int
	ok := false
	switch t := v.(type) {
	case float64: // a JSON number
		ok = t == math.Trunc(t) && math.Abs(t) <= MaxSparkWorkers+1
		n = int(t)
	case int:
		n, ok = t, true
	default:
		n, ok = integer(t)
	}
	w := spec.Workers
	if !ok || n < w.Min || n > w.Max {
		return 0, &FieldError{Field: fieldName, Message: fmt.Sprintf("must be a whole number from %d to %d", w.Min, w.Max)}
	}
	return n, nil
}

// UsesSpark reports whether the base settings or any profile, option
// choice or unlisted choice can declare a Spark cluster, so that the
// service only watches Spark objects when some spawn can make them.
func (c *Config) UsesSpark() bool {
	if c.KubeSpawner.Spark.Enabled() {
		return true
	}
	declares := func(ov map[string]any) bool {
		v, ok := ov["spark"]
		return ok && v != nil
	}
	for _, prof := range c.profiles {
		if declares(prof.KubeSpawnerOverride) {
			return true
		}
		for _, opt := range prof.ProfileOptions {
			if declares(opt.UnlistedChoice.KubeSpawnerOverride) {
				return true
			}
			for _, ch := range opt.Choices {
				if declares(ch.KubeSpawnerOverride) {
					return true
				}
			}
		}
	}
	return false
}
