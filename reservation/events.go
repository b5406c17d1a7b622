package reservation

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strings"
	"text/template"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// topic groups events that share one throttle ledger entry per pod: every
// waiting reason but AnnotationIgnored shares "hold", so the newest hold
// event always states the current cause (§3.5).
type topic uint8

const (
	topicNone       topic = iota // admission and stop events: never throttled
	topicHold                    // why the pod waits
	topicAnnotation              // an ignored input annotation
)

// Event actions (the Event's "action" field).
const (
	actionAdmit   = "AdmitPod"
	actionLease   = "RequestOnDemandLease"
	actionRead    = "ReadAnnotations"
	actionDelete  = "DeletePod"
	actionRelink  = "RelinkPod"
	maxMessageLen = 1024
)

// The 19 reservation events: reason, type, throttle topic, action and the
// message template, in one table. Messages state what happened and what to
// do; waiting messages hold no relative time, because a message that
// changes is re-emitted at once.
const (
	WaitingForReservation   = "WaitingForReservation"
	ReservationFull         = "ReservationFull"
	ReservationTooSmall     = "ReservationTooSmall"
	OnDemandLeaseDenied     = "OnDemandLeaseDenied"
	OnDemandLeaseRejected   = "OnDemandLeaseRejected"
	OnDemandAdmissionPaused = "OnDemandAdmissionPaused"
	UnknownGpuClass         = "UnknownGpuClass"
	NoReservation           = "NoReservation"
	NoGpuRequest            = "NoGpuRequest"
	AnnotationIgnored       = "AnnotationIgnored"
	NoMatchingNode          = "NoMatchingNode"
	WaitingForNode          = "WaitingForNode"
	RuntimeGuaranteed       = "RuntimeGuaranteed"
	ReservationRelinked     = "ReservationRelinked"
	OverstayRelinked        = "OverstayRelinked"
	BestEffortAdmitted      = "BestEffortAdmitted"
	Preempted               = "Preempted"
	ReservationCancelled    = "ReservationCancelled"
	ReservationReassigned   = "ReservationReassigned"
)

type eventSpec struct {
	typ    string
	topic  topic
	action string
	text   string
}

const (
	typeNormal  = corev1.EventTypeNormal
	typeWarning = corev1.EventTypeWarning
)

var eventTable = map[string]eventSpec{
	// While a pod waits.
	WaitingForReservation: {typeNormal, topicHold, actionAdmit,
		`{{if .Freeing}}Your GPU reservation #{{.Res.ID}} ({{res .Res}}) is open, but the {{.Class}} GPUs it holds are not free yet; this pod will be admitted as soon as they are.` +
			`{{else}}Waiting for your GPU reservation #{{.Res.ID}} ({{res .Res}}) to open; this pod will be admitted shortly after it does.{{end}}` +
			`{{with .Why}} It cannot be admitted on demand before then: {{list .}}.{{end}}`},
	ReservationFull: {typeWarning, topicHold, actionAdmit,
		`Your GPU reservation #{{.Res.ID}} ({{res .Res}}) is fully in use by your pod(s) {{pods .Holders .MoreHolders}}. ` +
			`This pod will be admitted as soon as {{.Short}} GPU(s) are free under it. Stop one with kubectl delete pod <name> to start it sooner.` +
			`{{if not .FallbackAt.IsZero}} If it still does not fit at {{t .FallbackAt}}, it will be started on an on-demand lease instead, charged separately.{{end}}` +
			`{{with .Why}} It cannot be admitted on demand meanwhile: {{list .}}.{{end}}`},
	ReservationTooSmall: {typeWarning, topicHold, actionAdmit,
		`This pod requests {{.GPUs}} GPUs, but your GPU reservation #{{.Res.ID}} ({{res .Res}}) holds only {{.Res.GPUs}}, so the pod can never be admitted under it. ` +
			`Book a {{.Class}} reservation of at least {{.GPUs}} GPUs, or lower the pod's nvidia.com/gpu request and recreate it.` +
			`{{with .Why}} It cannot be admitted on demand either: {{list .}}.{{end}}`},
	OnDemandLeaseDenied: {typeWarning, topicHold, actionLease,
		`On-demand GPU lease for {{.GPUs}} x {{.Class}} was denied by the reservation service: {{.Denial}} The pod stays Pending; ` +
			`{{if eq .Ending "clear"}}the controller will keep retrying, and the reservation service expects this to clear by {{t .ClearBy}}.` +
			`{{else if eq .Ending "never"}}waiting will not change this: the pod stays Pending until its request changes or an administrator changes what refused it. If the reason looks wrong, contact support: {{.Contact}}` +
			`{{else}}the controller will keep retrying.{{end}}`},
	OnDemandLeaseRejected: {typeWarning, topicHold, actionLease,
		`On-demand GPU lease for {{.GPUs}} x {{.Class}} was rejected by the reservation service: {{.Denial}} ` +
			`The request named user {{.User}} and workspace {{.Workspace}} ({{.WorkspaceSource}}).{{range .NearMiss}} {{.}}{{end}} ` +
			`Waiting will not fix this: correct the workspace (launch.sh -W, or the dsmlp/course label of a manifest pod) and recreate the pod; if these look right, contact support: {{.Contact}}`},
	OnDemandAdmissionPaused: {typeWarning, topicHold, actionLease,
		`On-demand GPU admission for gpu-class {{.Class}} is paused: {{.Cause}}, so no new on-demand jobs are started on this GPU class until that is resolved. ` +
			`Nothing about this pod needs to change; it stays Pending and the controller keeps retrying on its own. If this persists, contact support: {{.Contact}}`},
	UnknownGpuClass: {typeWarning, topicHold, actionAdmit,
		`This pod's gpu-class label is {{.Class}}, which is not a GPU class the reservation service knows, so no reservation can match it and it cannot be admitted on demand. ` +
			`Known classes: {{join .Known ", "}}. Correct the label and recreate the pod; if it is right, contact support: {{.Contact}}`},
	NoReservation: {typeWarning, topicHold, actionAdmit,
		`No GPU reservation matches this pod (user {{.User}}, gpu-class {{.Class}}, workspace {{.Workspace}}), and it cannot be admitted on demand: {{list .Why}}.` +
			`{{range .NearMiss}} {{.}}{{end}} Correct the pod and recreate it, or book a window for {{.Class}}.`},
	NoGpuRequest: {typeWarning, topicHold, actionAdmit,
		`This pod has gpu-class label {{.Class}} but requests no nvidia.com/gpu, so the reservation system will not admit it and it cannot start on {{.Class}} nodes. ` +
			`Request GPUs (launch.sh -g 1, or resources.limits nvidia.com/gpu in a manifest), or remove the gpu-class label for a CPU-only pod, and recreate the pod.`},
	AnnotationIgnored: {typeWarning, topicAnnotation, actionRead,
		`The pod's annotation {{.Key}}={{.Value}} was ignored: {{.Because}}. {{.Instead}} Remove or correct the annotation and recreate the pod if that is not what you want.`},
	NoMatchingNode: {typeWarning, topicHold, actionLease,
		`This pod's node selector {{.Selector}} matches none of the {{.Nodes}} schedulable node(s) of GPU class {{.Class}}, so it could not start on any of them and no on-demand lease is being requested for it.` +
			`{{with .OtherClass}} It does match nodes of GPU class {{.}}, so the pod's gpu-class label may be what is wrong.{{end}} ` +
			`Correct the node selector or affinity and recreate the pod; if it is right, the nodes it names may be cordoned or out of service, so contact support: {{.Contact}}`},
	WaitingForNode: {typeNormal, topicHold, actionLease,
		`No node of GPU class {{.Class}} that this pod's node selector {{.Selector}} allows has {{.GPUs}} GPU(s) free, so no on-demand lease is being requested yet: one would be charged while the pod waited. ` +
			`It is retried until one of those nodes has room. Widening or removing the node selector or affinity would let it use the class's other nodes.`},

	// When a pod is admitted.
	RuntimeGuaranteed: {typeNormal, topicNone, actionAdmit,
		`GPU access guaranteed for {{dur .For}}, until {{t .Until}}. The pod may keep running after that, but can be preempted if reserved capacity is needed.`},
	ReservationRelinked: {typeNormal, topicNone, actionRelink,
		`Pod re-linked to GPU reservation #{{.Res.ID}}: ` +
			`{{if eq .Variant "merged"}}the on-demand lease #{{.Prev.ID}} it started under was merged into it now that the reservation's window has opened, and the lease released.` +
			`{{else if eq .Variant "chained"}}its previous reservation #{{.Prev.ID}} ended and this one directly follows it.` +
			`{{else}}its previous reservation #{{.Prev.ID}} was cancelled or replaced.{{end}} GPU access guaranteed until {{t .Until}}.`},
	OverstayRelinked: {typeNormal, topicNone, actionRelink,
		`Pod re-linked to GPU reservation #{{.Res.ID}}; no longer overstay. GPU access guaranteed until {{t .Until}}.`},
	BestEffortAdmitted: {typeNormal, topicNone, actionAdmit,
		`Admitted with no runtime guarantee and no charge: this pod may be stopped whenever a booking starting on GPU class {{.Class}}, or the on-demand headroom, needs its GPU.`},

	// When a pod is stopped: written before the delete, type Normal.
	Preempted: {typeNormal, topicNone, actionDelete,
		`Pod preempted to {{if .Headroom}}maintain {{.Headroom}}% free on-demand capacity headroom for gpu class {{.Class}}{{else}}free capacity for reservation(s) starting {{t .Boundary}}{{end}}: ` +
			`{{if .Unresolved}}its runtime guarantee could no longer be resolved{{else}}overstayed its runtime guarantee by {{dur .Overstay}}{{end}}.`},
	ReservationCancelled: {typeNormal, topicNone, actionDelete,
		`Pod evicted: GPU reservation cancelled by {{if eq .Variant "other"}}another user{{else}}user{{end}}{{if eq .Variant "superseded"}} (reason: superseded){{end}}.`},
	ReservationReassigned: {typeNormal, topicNone, actionDelete,
		`Pod evicted: GPU reservation reassigned to {{.NewOwner}}.`},
}

// resView is a reservation as messages show it.
type resView struct {
	ID         int64
	GPUs       int
	Class      string
	Start, End time.Time
}

func viewOf(r *Reservation) *resView {
	if r == nil {
		return nil
	}
	return &resView{ID: r.ID, GPUs: r.GPUs, Class: r.Class, Start: r.Start, End: r.End}
}

// eventData is what message templates may use; each template reads the few
// fields its reason needs.
type eventData struct {
	User, Workspace, WorkspaceSource, Class string
	GPUs                                    int
	Res, Prev                               *resView
	Variant                                 string
	Freeing                                 bool
	Holders                                 []string
	MoreHolders, Short                      int
	Why, NearMiss, Known                    []string
	FallbackAt, ClearBy, Until, Boundary    time.Time
	Denial, Ending, Cause                   string
	Selector, OtherClass                    string
	Nodes                                   int
	Key, Value, Because, Instead            string
	For, Overstay                           time.Duration
	Headroom                                int
	Unresolved                              bool
	NewOwner, Contact                       string
}

// fingerprint identifies the message d renders for reason without
// rendering it (a message is a pure function of reason and data), so the
// throttle can drop a repeat cheaply. Every field must be hashed.
func (d *eventData) fingerprint(seed maphash.Seed, reason string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	str := func(s string) {
		h.WriteString(s)
		h.WriteByte(0)
	}
	num := func(n int64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	tm := func(t time.Time) { num(t.UnixNano()) }
	res := func(r *resView) {
		if r == nil {
			num(-1)
			return
		}
		num(r.ID)
		num(int64(r.GPUs))
		str(r.Class)
		tm(r.Start)
		tm(r.End)
	}
	list := func(l []string) {
		num(int64(len(l)))
		for _, s := range l {
			str(s)
		}
	}
	flag := func(b bool) {
		if b {
			num(1)
		} else {
			num(0)
		}
	}
	str(reason)
	str(d.User)
	str(d.Workspace)
	str(d.WorkspaceSource)
	str(d.Class)
	num(int64(d.GPUs))
	res(d.Res)
	res(d.Prev)
	str(d.Variant)
	flag(d.Freeing)
	list(d.Holders)
	num(int64(d.MoreHolders))
	num(int64(d.Short))
	list(d.Why)
	list(d.NearMiss)
	list(d.Known)
	tm(d.FallbackAt)
	tm(d.ClearBy)
	tm(d.Until)
	tm(d.Boundary)
	str(d.Denial)
	str(d.Ending)
	str(d.Cause)
	str(d.Selector)
	str(d.OtherClass)
	num(int64(d.Nodes))
	str(d.Key)
	str(d.Value)
	str(d.Because)
	str(d.Instead)
	num(int64(d.For))
	num(int64(d.Overstay))
	num(int64(d.Headroom))
	flag(d.Unresolved)
	str(d.NewOwner)
	str(d.Contact)
	return h.Sum64()
}

// messages renders event messages with times in the display zone.
type messages struct {
	tmpl    *template.Template
	loc     *time.Location
	contact string
	seed    maphash.Seed
}

func newMessages(loc *time.Location, contact string) (*messages, error) {
	m := &messages{loc: loc, contact: contact, seed: maphash.MakeSeed()}
	root := template.New("events").Option("missingkey=error").Funcs(template.FuncMap{
		"t":    m.formatTime,
		"dur":  formatDuration,
		"res":  m.formatRes,
		"list": joinList,
		"join": strings.Join,
		"pods": podList,
	})
	for reason, spec := range eventTable {
		if _, err := root.New(reason).Parse(spec.text); err != nil {
			return nil, fmt.Errorf("parsing message template of %s: %w", reason, err)
		}
	}
	m.tmpl = root
	return m, nil
}

// render builds the event for reason about pod.
func (m *messages) render(pod PodRef, reason string, d *eventData) Event {
	spec := eventTable[reason]
	d.Contact = m.contact
	var b strings.Builder
	if err := m.tmpl.ExecuteTemplate(&b, reason, d); err != nil {
		// The templates are fixed and tested; an error here is a bug, and
		// the event still says which reason applies.
		b.Reset()
		b.WriteString(reason)
	}
	return Event{Pod: pod, Reason: reason, Type: spec.typ, Action: spec.action, Message: capMessage(b.String())}
}

func (m *messages) formatTime(t time.Time) string {
	return t.In(m.loc).Format("2006-01-02 15:04:05 MST")
}

func (m *messages) formatRes(r *resView) string {
	return fmt.Sprintf("%d x %s, %s to %s", r.GPUs, r.Class, m.formatTime(r.Start), m.formatTime(r.End))
}

// formatDuration writes 1h09m59s or 45m03s.
func formatDuration(d time.Duration) string {
	d = max(d.Round(time.Second), 0)
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	if h > 0 {
		return fmt.Sprintf("%dh%02dm%02ds", h, m, s)
	}
	return fmt.Sprintf("%dm%02ds", m, s)
}

// joinList writes "a", "a and b", "a, b and c".
func joinList(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

func podList(names []string, more int) string {
	if more > 0 {
		return joinList(append(append([]string(nil), names...), fmt.Sprintf("%d others", more)))
	}
	return joinList(names)
}

// clean makes a user-controlled string safe to quote in a message.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > 253 {
		s = s[:253]
	}
	return s
}

func capMessage(s string) string {
	if utf8.RuneCountInString(s) <= maxMessageLen {
		return s
	}
	r := []rune(s)
	return string(r[:maxMessageLen-1]) + "…"
}

// throttle is the engine's own event ledger (client-go's correlator would
// rate-limit and aggregate differently): per pod and topic it keeps the last
// reason and message fingerprint written, and lets a waiting event through
// when either changed or the repeat interval has passed.
type throttle struct {
	repeat  time.Duration
	entries map[throttleKey]*throttleEntry
	gen     uint64
}

type throttleKey struct {
	uid   types.UID
	topic topic
}

type throttleEntry struct {
	reason      string
	fingerprint uint64
	at          time.Time
	gen         uint64
}

func newThrottle(repeat time.Duration) *throttle {
	return &throttle{repeat: repeat, entries: map[throttleKey]*throttleEntry{}}
}

// allow reports whether an event with this reason and message fingerprint
// should be written now, and records it if so.
func (t *throttle) allow(uid types.UID, tp topic, reason string, fp uint64, now time.Time) bool {
	k := throttleKey{uid, tp}
	e := t.entries[k]
	if e == nil {
		e = &throttleEntry{}
		t.entries[k] = e
	}
	e.gen = t.gen
	if e.reason == reason && e.fingerprint == fp && now.Sub(e.at) < t.repeat && !now.Before(e.at) {
		return false
	}
	e.reason, e.fingerprint, e.at = reason, fp, now
	return true
}

// endCycle forgets entries no event touched this cycle: the pod was
// admitted, deleted or now waits silently, so its next event is news.
func (t *throttle) endCycle() {
	for k, e := range t.entries {
		if e.gen != t.gen {
			delete(t.entries, k)
		}
	}
	t.gen++
}
