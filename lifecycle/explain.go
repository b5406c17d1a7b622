package lifecycle

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dsmlp/spawner/reservation"
	"github.com/dsmlp/spawner/spawner"
)

// The hub's progress page shows the newest progress message as its
// headline, so each Kubernetes event about a spawn's pod becomes one plain
// sentence: what is happening, what is short, and until when the spawn
// waits. The event's own text stays in raw_event, which the hub-side relay
// lists in the page's event log.

// Reservations is what progress reads of the GPU reservation engine to
// say when a waiting GPU pod could get its GPUs;
// *gpucontroller.Controller implements it.
type Reservations interface {
	Reservations() []reservation.Reservation
	Classes(horizon time.Duration) ([]reservation.ClassStatus, error)
}

// resourceGPU is the extended resource GPU pods request.
const resourceGPU corev1.ResourceName = "nvidia.com/gpu"

// reasonFailedScheduling is kube-scheduler's event reason for a pod it
// could not place.
const reasonFailedScheduling = "FailedScheduling"

// kubeletText turns one event reason and message shape into a sentence.
// The say template expands the message's submatches (${1}, ...); waits
// marks a state the spawn waits through, so the sentence gets the deadline.
type kubeletText struct {
	reason string
	re     *regexp.Regexp
	say    string
	waits  bool
}

// kubeletTexts are the kubelet's (and kube-scheduler's Scheduled) events as
// kubelet v1.37 writes them (pkg/kubelet/images/image_manager.go,
// pkg/kubelet/kuberuntime, pkg/volume/util/operationexecutor), the dev
// cluster's local-runtime node and kwok included. The first match wins, so
// specific shapes come before a reason's catch-all.
var kubeletTexts = []kubeletText{
	{"Scheduled", regexp.MustCompile(`^Successfully assigned \S+ to (\S+)$`),
		"Found a node for the server (${1}); starting it.", false},
	{"Pulling", regexp.MustCompile(`^Pulling image "([^"]+)"`),
		"Downloading the server's image ${1}; a large image can take several minutes.", true},
	{"Pulled", regexp.MustCompile(`^Successfully pulled image "([^"]+)" in (\S+)`),
		"Downloaded the image ${1} in ${2}.", false},
	{"Pulled", regexp.MustCompile(`^Container image "([^"]+)" already present on machine`),
		"The image ${1} is already on the node.", false},
	{"Failed", regexp.MustCompile(`^Failed to pull image "([^"]+)": .*(?:not found|manifest unknown|does not exist)`),
		"The image ${1} could not be downloaded: the registry does not have it, so the image name or tag may be wrong. Kubernetes keeps retrying.", true},
	{"Failed", regexp.MustCompile(`^Failed to pull image "([^"]+)": .*(?:unauthorized|denied|authentication required|403 Forbidden)`),
		"The image ${1} could not be downloaded: the registry refused access to it. Kubernetes keeps retrying.", true},
	{"Failed", regexp.MustCompile(`^Failed to pull image "([^"]+)"`),
		"The image ${1} could not be downloaded. Kubernetes keeps retrying.", true},
	{"Failed", regexp.MustCompile(`^Error: ErrImagePull$`),
		"Downloading the server's image failed (ErrImagePull). Kubernetes keeps retrying.", true},
	{"Failed", regexp.MustCompile(`^Error: ImagePullBackOff$`),
		"Downloading the server's image keeps failing (ImagePullBackOff); Kubernetes waits longer before each new try.", true},
	{"Failed", regexp.MustCompile(`^Error: (.+)$`),
		"The server's container could not be started: ${1}.", true},
	{"BackOff", regexp.MustCompile(`^Back-off pulling image "([^"]+)"`),
		"Downloading the image ${1} failed; Kubernetes waits before it tries again (ImagePullBackOff).", true},
	{"BackOff", regexp.MustCompile(`^Back-off restarting failed container (\S+)`),
		"The server's container ${1} keeps exiting right after it starts (CrashLoopBackOff); Kubernetes restarts it after a growing delay. The container's log says why it exits.", true},
	{"ErrImageNeverPull", regexp.MustCompile(`^Container image "([^"]+)" is not present with pull policy of Never`),
		"The image ${1} is not on the node, and the pull policy Never forbids downloading it.", true},
	{"FailedMount", regexp.MustCompile(`^MountVolume\.SetUp failed for volume "([^"]+)" : (.+)$`),
		"The volume ${1} could not be mounted (${2}). Kubernetes keeps retrying.", true},
	{"FailedMount", regexp.MustCompile(`^Unable to attach or mount volumes: unmounted volumes=\[([^\]]*)\]`),
		"The volume(s) ${1} are not mounted yet. Kubernetes keeps retrying.", true},
	{"FailedMount", regexp.MustCompile(``),
		"A volume of the server could not be mounted yet. Kubernetes keeps retrying.", true},
	{"FailedAttachVolume", regexp.MustCompile(``),
		"A storage volume could not be attached to the server's node yet. Kubernetes keeps retrying.", true},
	{"FailedCreatePodSandBox", regexp.MustCompile(``),
		"Kubernetes could not set up the server's sandbox (its network and runtime) yet and keeps retrying.", true},
	{"Created", regexp.MustCompile(`^(?:Created container|Container created)`),
		"The server's container was created.", false},
	{"Started", regexp.MustCompile(`^(?:Started container|Container started)`),
		"The server's container started.", false},
	{"Killing", regexp.MustCompile(`^Stopping container (\S+)`),
		"The server's container ${1} is being stopped.", false},
	{"Unhealthy", regexp.MustCompile(`^(Readiness|Liveness|Startup) probe failed: ?(.*)$`),
		"The server's health check (${1} probe) failed: ${2}", true},
}

// classShortDenial marks the lease denial for a class with too few GPUs
// free (reservation/route.go policy): only then do reservation ends say
// when one frees up, unlike a workspace's own ceiling.
const classShortDenial = "are free for on-demand use."

// engineTime finds a time the reservation engine wrote into a message
// (reservation's formatTime layout).
var engineTime = regexp.MustCompile(`\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Z][A-Za-z0-9+-]*`)

// fitVerdict is kube-scheduler's FitError message taken apart
// (pkg/scheduler/framework/types.go: "0/N nodes are available: <PreFilter
// or Filter reasons>. <PostFilter message>").
type fitVerdict struct {
	short      []corev1.ResourceName // "Insufficient <resource>", "Too many pods"
	taint      bool                  // "node(s) had untolerated taint(s)"
	selector   bool                  // "node(s) didn't match Pod's node affinity/selector", "...requested node name"
	cordoned   bool                  // "node(s) were unschedulable"
	storage    bool                  // volume binding and volume node affinity
	pvcMissing string                // `persistentvolumeclaim "x" not found`
	pvcUnbound bool                  // "pod has unbound immediate PersistentVolumeClaims"
	other      []string
}

var (
	fitPrefix  = regexp.MustCompile(`^0/\d+ nodes are available: `)
	fitCounted = regexp.MustCompile(`^\d+ (.+)$`)
	pvcMissing = regexp.MustCompile(`persistentvolumeclaim "([^"]+)" not found`)
)

// parseFit reads a FailedScheduling message; false when it is not a
// FitError.
func parseFit(msg string) (fitVerdict, bool) {
	var v fitVerdict
	loc := fitPrefix.FindStringIndex(msg)
	if loc == nil {
		return v, false
	}
	rest := msg[loc[1]:]
	// The PostFilter part repeats the count for preemption; it never says
	// what is short.
	if i := strings.Index(rest, " preemption: "); i >= 0 {
		rest = rest[:i]
	}
	rest = strings.TrimSuffix(strings.TrimSpace(rest), ".")
	for _, r := range strings.Split(rest, ", ") {
		if m := fitCounted.FindStringSubmatch(r); m != nil {
			r = m[1]
		}
		switch {
		case strings.HasPrefix(r, "Insufficient "):
			v.short = append(v.short, corev1.ResourceName(strings.TrimPrefix(r, "Insufficient ")))
		case r == "Too many pods":
			v.short = append(v.short, corev1.ResourcePods)
		case strings.Contains(r, "untolerated taint") || strings.Contains(r, "taints that the pod didn't tolerate"):
			v.taint = true
		case strings.Contains(r, "didn't match Pod's node affinity/selector") || strings.Contains(r, "didn't match the requested node name"):
			v.selector = true
		case strings.Contains(r, "were unschedulable"):
			v.cordoned = true
		case pvcMissing.MatchString(r):
			v.pvcMissing = pvcMissing.FindStringSubmatch(r)[1]
		case strings.Contains(r, "unbound immediate PersistentVolumeClaims"):
			v.pvcUnbound = true
		case strings.Contains(r, "persistent volume") || strings.Contains(r, "PersistentVolume") ||
			strings.Contains(r, "volume node affinity") || strings.Contains(r, "free storage"):
			v.storage = true
		case r != "":
			v.other = append(v.other, r)
		}
	}
	slices.Sort(v.short)
	v.short = slices.Compact(v.short)
	return v, true
}

// engineHolds reports whether the verdict only restates that the GPU
// reservation engine has not admitted the pod: its class nodes are tainted
// until then, the rest are not its class.
func (v fitVerdict) engineHolds() bool {
	return v.taint && len(v.short) == 0 && v.pvcMissing == "" && !v.pvcUnbound && !v.storage
}

// narrator writes a spawn's progress headlines. It remembers the engine's
// current reason while a GPU pod waits, so that the scheduler's taint
// verdict, which only says the engine has not admitted the pod yet,
// repeats the engine's reason instead of replacing it.
type narrator struct {
	needs    corev1.ResourceList // what the notebook container asks for
	gpuClass string
	loc      *time.Location
	// freeAt says when gpus GPUs of a class could be free; nil without the
	// reservation engine.
	freeAt func(class string, gpus int) (time.Time, bool)
	// held is the engine's current waiting reason; empty when it holds
	// nothing (no event yet, or admitted).
	held string
	// last is the newest explanation, without the deadline, for a failure
	// message.
	last string
}

func newNarrator(s *spawner.Settings, loc *time.Location, freeAt func(string, int) (time.Time, bool)) *narrator {
	if loc == nil {
		loc = time.Local
	}
	return &narrator{needs: needsOf(s), gpuClass: s.GPUClass, loc: loc, freeAt: freeAt}
}

// headline is the progress message for ev: a sentence, and when the spawn
// waits through what it reports, until when.
func (n *narrator) headline(ev *corev1.Event, now, deadline time.Time) string {
	text, waits := n.explain(ev)
	n.last = text
	if waits && !deadline.IsZero() {
		text += " The spawn waits until " + formatClock(deadline, now, n.loc) + "."
	}
	return text
}

func (n *narrator) explain(ev *corev1.Event) (string, bool) {
	if isEngineEvent(ev) {
		return n.engine(ev)
	}
	if ev.Reason == reasonFailedScheduling {
		v, ok := parseFit(ev.Message)
		if !ok {
			return ev.Message, true
		}
		if n.held != "" && v.engineHolds() {
			return n.held, true
		}
		return n.fit(v), true
	}
	for _, k := range kubeletTexts {
		if k.reason != ev.Reason {
			continue
		}
		if m := k.re.FindStringSubmatchIndex(ev.Message); m != nil {
			return string(k.re.ExpandString(nil, k.say, ev.Message, m)), k.waits
		}
	}
	// An event nobody translated yet is told in its own words.
	return ev.Message, false
}

func isEngineEvent(ev *corev1.Event) bool {
	return ev.Source.Component == reservation.Component || ev.ReportingController == reservation.Component
}

// engine keeps the reservation engine's sentences, which already say what
// happened and what to do, and adds when a GPU could be free if the engine
// knows and the message does not say.
func (n *narrator) engine(ev *corev1.Event) (string, bool) {
	text := ev.Message
	if reservation.HoldOf(ev.Reason, ev.Message) != reservation.HoldClears {
		// An ignored annotation does not end the hold; admission does.
		if ev.Reason == reservation.RuntimeGuaranteed || ev.Reason == reservation.BestEffortAdmitted {
			n.held = ""
		}
		return text, false
	}
	if ev.Reason == reservation.OnDemandLeaseDenied && strings.Contains(text, classShortDenial) &&
		n.freeAt != nil && n.gpuClass != "" && !engineTime.MatchString(text) {
		gpus := 1
		if q, ok := n.needs[resourceGPU]; ok && q.Value() > 0 {
			gpus = int(q.Value())
		}
		if t, ok := n.freeAt(n.gpuClass, gpus); ok {
			what := "A GPU"
			if gpus > 1 {
				what = strconv.Itoa(gpus) + " GPUs"
			}
			text += fmt.Sprintf(" %s of class %s could be free from %s, when reserved use ends.", what, n.gpuClass, n.formatTime(t))
		}
	}
	n.held = text
	return text, true
}

func (n *narrator) formatTime(t time.Time) string {
	return t.In(n.loc).Format("2006-01-02 15:04:05 MST")
}

// fit says why no node takes the pod, most actionable cause first.
func (n *narrator) fit(v fitVerdict) string {
	switch {
	case v.pvcMissing != "":
		return fmt.Sprintf("The server's storage volume (PersistentVolumeClaim %s) does not exist yet, so no node can take the server until it does.", v.pvcMissing)
	case v.pvcUnbound:
		return "The server's storage volume is not ready yet: its PersistentVolumeClaim is not bound to a disk, so no node can take the server until it is."
	case len(v.short) > 0:
		parts := make([]string, len(v.short))
		for i, r := range v.short {
			parts[i] = n.freeAmount(r)
		}
		s := "No node has " + strings.Join(parts, " or ")
		if need := n.needSummary(); need != "" {
			s += " (needed: " + need + ")"
		}
		return s + ", so the server waits for one to free up."
	case v.taint && n.gpuClass != "":
		return fmt.Sprintf("The GPU nodes of class %s are held for the GPU reservation system, which has not admitted this server yet.", n.gpuClass)
	case v.selector:
		return "No node matches this server's node selection, so it cannot start until a matching node is available."
	case v.taint:
		return "Every node that could run this server is set aside for other work (untolerated taints), so it cannot start there."
	case v.cordoned:
		return "The nodes that could run this server are closed to new servers (cordoned), for example for maintenance."
	case v.storage:
		return "No node can reach the storage volume this server needs."
	case len(v.other) > 0:
		return "No node can take this server yet: " + strings.Join(v.other, "; ") + "."
	}
	return "No node can take this server yet."
}

// freeAmount names what a node lacks, with the amount this pod asks for.
func (n *narrator) freeAmount(r corev1.ResourceName) string {
	q, ok := n.needs[r]
	switch r {
	case corev1.ResourcePods:
		return "room for another pod"
	case corev1.ResourceCPU:
		if ok {
			return formatCPU(q) + " free CPU"
		}
		return "enough free CPU"
	case corev1.ResourceMemory:
		if ok {
			return formatBytes(q) + " of free memory"
		}
		return "enough free memory"
	case corev1.ResourceEphemeralStorage:
		if ok {
			return formatBytes(q) + " of free disk space"
		}
		return "enough free disk space"
	}
	if ok {
		return q.String() + " free " + string(r)
	}
	return "enough free " + string(r)
}

// needSummary is the pod's request as a student would say it: "1 GPU,
// 2 CPU, 4 GiB memory".
func (n *narrator) needSummary() string {
	var parts []string
	if q, ok := n.needs[resourceGPU]; ok {
		unit := " GPU"
		if q.Value() != 1 {
			unit = " GPUs"
		}
		parts = append(parts, q.String()+unit)
	}
	if q, ok := n.needs[corev1.ResourceCPU]; ok {
		parts = append(parts, formatCPU(q)+" CPU")
	}
	if q, ok := n.needs[corev1.ResourceMemory]; ok {
		parts = append(parts, formatBytes(q)+" memory")
	}
	var rest []string
	for r, q := range n.needs {
		if r != resourceGPU && r != corev1.ResourceCPU && r != corev1.ResourceMemory {
			rest = append(rest, q.String()+" "+string(r))
		}
	}
	slices.Sort(rest)
	return strings.Join(append(parts, rest...), ", ")
}

// needsOf is what the notebook container requests: each resource's
// guarantee, else its limit, as Kubernetes defaults a missing request to
// the limit.
func needsOf(s *spawner.Settings) corev1.ResourceList {
	out := corev1.ResourceList{}
	cpu := func(f *float64) (resource.Quantity, bool) {
		if f == nil || *f == 0 {
			return resource.Quantity{}, false
		}
		return *resource.NewMilliQuantity(int64(*f*1000+0.5), resource.DecimalSI), true
	}
	if q, ok := cpu(s.CPUGuarantee); ok {
		out[corev1.ResourceCPU] = q
	} else if q, ok := cpu(s.CPULimit); ok {
		out[corev1.ResourceCPU] = q
	}
	if b := cmp.Or(s.MemGuarantee, s.MemLimit); b > 0 {
		out[corev1.ResourceMemory] = *resource.NewQuantity(int64(b), resource.BinarySI)
	}
	for _, m := range []spawner.ResourceMap{s.ExtraResourceLimits, s.ExtraResourceGuarantees} { // guarantees win
		for k, v := range m {
			if q, err := resource.ParseQuantity(v); err == nil {
				out[corev1.ResourceName(k)] = q
			}
		}
	}
	return out
}

func formatCPU(q resource.Quantity) string {
	return strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', -1, 64)
}

// formatBytes writes 4 GiB, 512 MiB or 1.5 GiB.
func formatBytes(q resource.Quantity) string {
	b := float64(q.Value())
	for _, u := range []struct {
		name string
		size float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.size {
			return strconv.FormatFloat(float64(int64(b/u.size*10+0.5))/10, 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatInt(q.Value(), 10) + " bytes"
}

// formatClock writes a time of day, with the date when it is not today.
func formatClock(t, now time.Time, loc *time.Location) string {
	t, now = t.In(loc), now.In(loc)
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05 MST")
	}
	return t.Format("2006-01-02 15:04:05 MST")
}

// gpusFreeAt is the first end of a reservation of the class after which
// gpus GPUs of its capacity are no longer reserved: the earliest a waiting
// pod could get them, if the pods under the ended reservations stop then.
// False when no reservation end frees enough.
func gpusFreeAt(rs []reservation.Reservation, class string, capacity, gpus int, now time.Time) (time.Time, bool) {
	if capacity < gpus {
		return time.Time{}, false
	}
	var live []reservation.Reservation
	var ends []time.Time
	for _, r := range rs {
		if r.Class == class && r.Status != reservation.StatusCancelled && r.End.After(now) && r.End.After(r.Start) {
			live = append(live, r)
			ends = append(ends, r.End)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	for _, t := range ends {
		held := 0
		for _, r := range live {
			if !r.Start.After(t) && t.Before(r.End) {
				held += r.GPUs
			}
		}
		if capacity-held >= gpus {
			return t, true
		}
	}
	return time.Time{}, false
}
