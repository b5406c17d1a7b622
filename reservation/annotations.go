package reservation

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Annotation keys (§3.6), without the configurable prefix.
const (
	// Written at admission and kept current.
	AnnBookingReference = "booking-reference"
	AnnKind             = "reservation-kind"
	AnnStart            = "reservation-start"
	AnnEnd              = "reservation-end"
	AnnGPUCount         = "reservation-gpu-count"
	AnnClassName        = "gpu-class-name"
	AnnAdmittedAt       = "admitted-at"
	AnnGuaranteedUntil  = "guaranteed-until"
	AnnGuaranteeStatus  = "guarantee-status"
	AnnRuntimeLimit     = "pod-runtime-limit-seconds"
	// Written by the preemption sweep while the pod is at risk.
	AnnWarningAt      = "termination-warning-at"
	AnnWarningRisk    = "termination-warning-risk"
	AnnWarningMessage = "termination-warning-message"
	// Read, never written.
	AnnMinimumRuntime   = "minimum-runtime-seconds"
	AnnRuntimeGuarantee = "runtime-guarantee"
	AnnUsageGroup       = "usage-group"
)

// Guarantee statuses.
const (
	StatusGuaranteed = "guaranteed"
	StatusOverstay   = "overstay"
)

// utcLayout is the annotations' time format, always UTC.
const utcLayout = "2006-01-02T15:04:05Z"

func formatUTC(t time.Time) string { return t.UTC().Format(utcLayout) }

func parseUTC(s string) (time.Time, bool) {
	t, err := time.Parse(utcLayout, s)
	return t, err == nil
}

// annotationKeys holds the prefixed keys, built once so the hot path does
// not concatenate.
type annotationKeys struct {
	ref, kind, start, end, gpus, className, admittedAt, until, status, runtime string
	warnAt, warnRisk, warnMsg                                                  string
	minRuntime, guarantee, usageGroup                                          string
	written                                                                    []string
}

func newAnnotationKeys(prefix string) annotationKeys {
	k := annotationKeys{
		ref: prefix + AnnBookingReference, kind: prefix + AnnKind, start: prefix + AnnStart, end: prefix + AnnEnd,
		gpus: prefix + AnnGPUCount, className: prefix + AnnClassName, admittedAt: prefix + AnnAdmittedAt,
		until: prefix + AnnGuaranteedUntil, status: prefix + AnnGuaranteeStatus, runtime: prefix + AnnRuntimeLimit,
		warnAt: prefix + AnnWarningAt, warnRisk: prefix + AnnWarningRisk, warnMsg: prefix + AnnWarningMessage,
		minRuntime: prefix + AnnMinimumRuntime, guarantee: prefix + AnnRuntimeGuarantee, usageGroup: prefix + AnnUsageGroup,
	}
	k.written = []string{k.ref, k.kind, k.start, k.end, k.gpus, k.className, k.admittedAt, k.until, k.status,
		k.runtime, k.warnAt, k.warnRisk, k.warnMsg}
	return k
}

// warning is a termination warning for a pod at risk of preemption.
type warning struct {
	at      time.Time
	risk    float64
	message string
}

// admittedState is what an admitted pod's annotations describe.
type admittedState struct {
	// res is the reservation the pod runs under; nil keeps the reservation
	// keys as they are (the record is gone from the store).
	res       *Reservation
	className string
	now       time.Time
	// until is the guarantee instant; resolved is false when it cannot be
	// computed any more (the reservation was revoked).
	until    time.Time
	resolved bool
	// stamp marks an admission or relink: the once-per-link values
	// (runtime limit) are written afresh.
	stamp   bool
	warning *warning
}

func (s admittedState) overstay() bool { return !s.resolved || !s.now.Before(s.until) }

// desired is the complete set of written annotations an admitted pod
// should carry, given the ones it has. Values that are written once
// (admitted-at), frozen (guaranteed-until once overstay) or stale by design
// (the runtime limit) are carried over from current.
func (k *annotationKeys) desired(current map[string]string, s admittedState) map[string]string {
	return k.desiredInto(make(map[string]string, len(k.written)), current, s)
}

// desiredInto is desired writing into out, which it clears first.
func (k *annotationKeys) desiredInto(out, current map[string]string, s admittedState) map[string]string {
	clear(out)
	keep := func(key string) bool {
		v, ok := current[key]
		if ok {
			out[key] = v
		}
		return ok
	}
	if r := s.res; r != nil {
		out[k.ref] = refValue(r.ID)
		out[k.kind] = string(r.Kind)
		out[k.start] = formatUTC(r.Start)
		out[k.end] = formatUTC(r.End)
		out[k.gpus] = strconv.Itoa(r.GPUs)
		out[k.className] = s.className
	} else {
		for _, key := range []string{k.ref, k.kind, k.start, k.end, k.gpus, k.className} {
			keep(key)
		}
	}
	if !keep(k.admittedAt) {
		out[k.admittedAt] = formatUTC(s.now)
	}
	if s.overstay() {
		out[k.status] = StatusOverstay
		if !keep(k.until) {
			out[k.until] = formatUTC(cmpOrTime(s.until, s.now))
		}
	} else {
		out[k.status] = StatusGuaranteed
		out[k.until] = formatUTC(s.until)
	}
	if s.stamp || !keep(k.runtime) {
		limit := int64(0)
		if s.resolved && s.until.After(s.now) {
			limit = int64(s.until.Sub(s.now) / time.Second)
		}
		out[k.runtime] = strconv.FormatInt(limit, 10)
	}
	if w := s.warning; w != nil {
		out[k.warnAt] = formatUTC(w.at)
		out[k.warnRisk] = strconv.FormatFloat(w.risk, 'f', 2, 64)
		out[k.warnMsg] = w.message
	}
	return out
}

func cmpOrTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// diff returns the annotation changes that turn current into desired over
// the written keys only (input annotations are never touched), or nil when
// there is nothing to write: an unchanged pod costs no PATCH.
func (k *annotationKeys) diff(current, desired map[string]string) map[string]*string {
	var out map[string]*string
	for _, key := range k.written {
		want, wantOK := desired[key]
		have, haveOK := current[key]
		switch {
		case wantOK && (!haveOK || have != want):
			if out == nil {
				out = map[string]*string{}
			}
			out[key] = &want
		case !wantOK && haveOK:
			if out == nil {
				out = map[string]*string{}
			}
			out[key] = nil
		}
	}
	return out
}

// render lists annotations as sorted key=value lines (goldens, debugging).
func renderAnnotations(m map[string]string) string {
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(key)
		b.WriteByte('=')
		b.WriteString(m[key])
		b.WriteByte('\n')
	}
	return b.String()
}

func refValue(id int64) string { return "res-" + strconv.FormatInt(id, 10) }

// parseRef reads a booking-reference value; 0 means unreadable.
func parseRef(v string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(v, "res-"), 10, 64)
	if err != nil || n <= 0 || !strings.HasPrefix(v, "res-") {
		return 0
	}
	return n
}

// WrittenAnnotations are the keys (unprefixed) the engine writes on
// admitted pods, for the downward-API files of /etc/podinfo.
func WrittenAnnotations() []string {
	return []string{AnnBookingReference, AnnKind, AnnStart, AnnEnd, AnnGPUCount, AnnClassName, AnnAdmittedAt,
		AnnGuaranteedUntil, AnnGuaranteeStatus, AnnRuntimeLimit, AnnWarningAt, AnnWarningRisk, AnnWarningMessage}
}
