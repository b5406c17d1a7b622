package reservation

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

// Config is the engine's configuration: the "reservation" section of the
// spawner configuration file. Every duration is a Go duration string
// ("30m"); a zero or missing value takes the default given.
type Config struct {
	// AnnotationPrefix prefixes every annotation the engine reads or
	// writes. Defaults to "galends/", the keys the platform's downward-API
	// manifests and notebook widget read.
	AnnotationPrefix string `json:"annotation_prefix,omitempty"`
	// TaintKey is the NoSchedule taint on reservation nodes (value = class)
	// and the key of the toleration admission adds. Defaults to
	// "gpu-class-reservation".
	TaintKey string `json:"taint_key,omitempty"`
	// SchedulingGate, when set, is removed from a pod in its admission
	// PATCH. Default none.
	SchedulingGate string `json:"scheduling_gate,omitempty"`
	// Classes is the GPU class catalogue. Required.
	Classes []GPUClass `json:"classes"`
	// Workspaces are the usage groups. ORG_ON_DEMAND is implicit (every
	// class, no ceilings) unless listed here.
	Workspaces []Workspace `json:"workspaces,omitempty"`
	// OnDemand enables on-demand leases at all. Defaults to true.
	OnDemand *bool `json:"on_demand,omitempty"`
	// BestEffort enables best-effort admission for pods annotated
	// runtime-guarantee: none. Defaults to false (as on DSMLP).
	BestEffort bool `json:"best_effort,omitempty"`
	// ClaimHorizon: a booking opening within it makes a pod wait for it
	// instead of taking a lease. Defaults to 30m.
	ClaimHorizon metav1.Duration `json:"claim_horizon,omitzero"`
	// LeaseBuffer is added to a lease's runtime. Defaults to 10m.
	LeaseBuffer metav1.Duration `json:"lease_buffer,omitzero"`
	// DefaultRuntime sizes a lease for pods without minimum-runtime-seconds.
	// Defaults to 1h.
	DefaultRuntime metav1.Duration `json:"default_runtime,omitzero"`
	// FullFallback: a lease-eligible pod waiting on a full booking falls back
	// to a lease this long after the booking opened or the pod was created,
	// whichever is later. Defaults to 10m.
	FullFallback metav1.Duration `json:"full_fallback,omitzero"`
	// NoShowAfter: an open booking unclaimed this long after its start is
	// cancelled. Defaults to 15m.
	NoShowAfter metav1.Duration `json:"no_show_after,omitzero"`
	// NoShowGrace: an open booking whose last pod ended (or that was open
	// when the engine started) is cancelled after this long unclaimed.
	// Defaults to 30m.
	NoShowGrace metav1.Duration `json:"no_show_grace,omitzero"`
	// EventRepeat is how often an unchanged waiting event is repeated.
	// Defaults to 30m.
	EventRepeat metav1.Duration `json:"event_repeat,omitzero"`
	// KillLead: pods past their guarantee may be preempted this long before
	// a booking boundary that needs their GPUs. Defaults to 15m.
	KillLead metav1.Duration `json:"kill_lead,omitzero"`
	// WarningLookahead: boundaries this close get termination warnings.
	// Defaults to 30m; must be at least KillLead.
	WarningLookahead metav1.Duration `json:"warning_lookahead,omitzero"`
	// HeadroomPercent of each class's GPUs is kept free for on-demand use by
	// preempting pods past their guarantee. Defaults to 15; 0 disables.
	HeadroomPercent *int `json:"headroom_percent,omitempty"`
	// HeadroomNotice is how long a headroom victim is warned before it may
	// be preempted. Defaults to 15m.
	HeadroomNotice metav1.Duration `json:"headroom_notice,omitzero"`
	// StuckAfter: an admitted booking pod still unbound this long after
	// admission pauses on-demand admission for its class. Defaults to 5m.
	StuckAfter metav1.Duration `json:"stuck_after,omitzero"`
	// WaitForScheduler makes the lease path wait for kube-scheduler's
	// verdict (PodScheduled=False, Unschedulable) so no lease is charged
	// for a pod that cannot fit for other reasons. Defaults to true.
	WaitForScheduler *bool `json:"wait_for_scheduler,omitempty"`
	// UnfixableShortages are scheduler-message fragments naming a shortage
	// no reservation fixes. Defaults to Insufficient cpu, memory and
	// ephemeral-storage.
	UnfixableShortages []string `json:"unfixable_shortages,omitempty"`
	// RiskHorizon is how far ahead Plan.Classes reports preemption risk at
	// booking boundaries. Defaults to 6h.
	RiskHorizon metav1.Duration `json:"risk_horizon,omitzero"`
	// SupportContact is appended where a message suggests contacting
	// support. Defaults to "datahub@ucsd.edu".
	SupportContact string `json:"support_contact,omitempty"`
	// TimeZone renders times in messages. Defaults to America/Los_Angeles.
	TimeZone string `json:"time_zone,omitempty"`
	// Seed seeds the choice of preemption victims (random within a kind).
	// Default 0.
	Seed uint64 `json:"seed,omitempty"`
}

// ParseConfig decodes the reservation section strictly (an unknown key is
// an error), fills in defaults and validates it; the error names every bad
// key under "reservation".
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	strict, err := sigsjson.UnmarshalStrict(data, &cfg)
	if err != nil {
		return Config{}, fmt.Errorf("parsing reservation config: %w", err)
	}
	root := field.NewPath("reservation")
	var errs field.ErrorList
	for _, e := range strict {
		errs = append(errs, field.Invalid(root, field.OmitValueType{}, e.Error()))
	}
	cfg = cfg.WithDefaults()
	errs = append(errs, cfg.validate(root)...)
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("invalid reservation config: %w", errs.ToAggregate())
	}
	return cfg, nil
}

// Defaults (§3.9).
const (
	defaultPrefix           = "galends/"
	defaultTaintKey         = "gpu-class-reservation"
	defaultClaimHorizon     = 30 * time.Minute
	defaultLeaseBuffer      = 10 * time.Minute
	defaultRuntime          = time.Hour
	defaultFullFallback     = 10 * time.Minute
	defaultNoShowAfter      = 15 * time.Minute
	defaultNoShowGrace      = 30 * time.Minute
	defaultEventRepeat      = 30 * time.Minute
	defaultKillLead         = 15 * time.Minute
	defaultWarningLookahead = 30 * time.Minute
	defaultHeadroomPercent  = 15
	defaultHeadroomNotice   = 15 * time.Minute
	defaultStuckAfter       = 5 * time.Minute
	defaultRiskHorizon      = 6 * time.Hour
	defaultSupport          = "datahub@ucsd.edu"
	defaultTimeZone         = "America/Los_Angeles"
)

// WithDefaults returns the configuration with every unset field defaulted.
func (c Config) WithDefaults() Config {
	c.AnnotationPrefix = cmp.Or(c.AnnotationPrefix, defaultPrefix)
	c.TaintKey = cmp.Or(c.TaintKey, defaultTaintKey)
	c.OnDemand = orTrue(c.OnDemand)
	dur := func(d *metav1.Duration, def time.Duration) {
		d.Duration = cmp.Or(d.Duration, def)
	}
	dur(&c.ClaimHorizon, defaultClaimHorizon)
	dur(&c.LeaseBuffer, defaultLeaseBuffer)
	dur(&c.DefaultRuntime, defaultRuntime)
	dur(&c.FullFallback, defaultFullFallback)
	dur(&c.NoShowAfter, defaultNoShowAfter)
	dur(&c.NoShowGrace, defaultNoShowGrace)
	dur(&c.EventRepeat, defaultEventRepeat)
	dur(&c.KillLead, defaultKillLead)
	dur(&c.WarningLookahead, defaultWarningLookahead)
	dur(&c.HeadroomNotice, defaultHeadroomNotice)
	dur(&c.StuckAfter, defaultStuckAfter)
	dur(&c.RiskHorizon, defaultRiskHorizon)
	if c.HeadroomPercent == nil {
		p := defaultHeadroomPercent
		c.HeadroomPercent = &p
	}
	c.WaitForScheduler = orTrue(c.WaitForScheduler)
	if c.UnfixableShortages == nil {
		c.UnfixableShortages = []string{"Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage"}
	}
	c.SupportContact = cmp.Or(c.SupportContact, defaultSupport)
	c.TimeZone = cmp.Or(c.TimeZone, defaultTimeZone)
	c.Classes = append([]GPUClass(nil), c.Classes...)
	for i := range c.Classes {
		c.Classes[i].DisplayName = cmp.Or(c.Classes[i].DisplayName, c.Classes[i].Label)
		c.Classes[i].OnDemand = orTrue(c.Classes[i].OnDemand)
	}
	c.Workspaces = append([]Workspace(nil), c.Workspaces...)
	for i := range c.Workspaces {
		c.Workspaces[i].OnDemand = orTrue(c.Workspaces[i].OnDemand)
	}
	return c
}

func orTrue(b *bool) *bool {
	if b != nil {
		return b
	}
	t := true
	return &t
}

// Validate checks a defaulted configuration and returns every problem,
// each naming its key.
func (c Config) Validate() error {
	if errs := c.validate(field.NewPath("reservation")); len(errs) > 0 {
		return fmt.Errorf("invalid reservation config: %w", errs.ToAggregate())
	}
	return nil
}

func (c Config) validate(root *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p := c.AnnotationPrefix; !strings.HasSuffix(p, "/") {
		errs = append(errs, field.Invalid(root.Child("annotation_prefix"), p, `must end with "/"`))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(strings.TrimSuffix(p, "/")) {
			errs = append(errs, field.Invalid(root.Child("annotation_prefix"), p, msg))
		}
	}
	for _, msg := range validation.IsQualifiedName(c.TaintKey) {
		errs = append(errs, field.Invalid(root.Child("taint_key"), c.TaintKey, msg))
	}
	if g := c.SchedulingGate; g != "" {
		for _, msg := range validation.IsQualifiedName(g) {
			errs = append(errs, field.Invalid(root.Child("scheduling_gate"), g, msg))
		}
	}

	classes := map[string]bool{}
	cp := root.Child("classes")
	if len(c.Classes) == 0 {
		errs = append(errs, field.Required(cp, "at least one GPU class"))
	}
	for i, cl := range c.Classes {
		p := cp.Index(i)
		switch {
		case cl.Label == "":
			errs = append(errs, field.Required(p.Child("label"), ""))
		case classes[cl.Label]:
			errs = append(errs, field.Duplicate(p.Child("label"), cl.Label))
		default:
			for _, msg := range validation.IsValidLabelValue(cl.Label) {
				errs = append(errs, field.Invalid(p.Child("label"), cl.Label, msg))
			}
		}
		classes[cl.Label] = true
		if cl.GPUsPerNode < 0 {
			errs = append(errs, field.Invalid(p.Child("gpus_per_node"), cl.GPUsPerNode, "must not be negative"))
		}
		for k, v := range cl.NodeSelector {
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(p.Child("node_selector").Key(k), k, msg))
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				errs = append(errs, field.Invalid(p.Child("node_selector").Key(k), v, msg))
			}
		}
	}

	names := map[string]bool{}
	wp := root.Child("workspaces")
	for i, ws := range c.Workspaces {
		p := wp.Index(i)
		switch {
		case ws.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case names[ws.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), ws.Name))
		}
		names[ws.Name] = true
		for j, cl := range ws.Classes {
			if !classes[cl] {
				errs = append(errs, field.NotFound(p.Child("classes").Index(j), cl))
			}
		}
		for cl, n := range ws.Caps {
			if !classes[cl] {
				errs = append(errs, field.NotFound(p.Child("caps").Key(cl), cl))
			}
			if n < 0 {
				errs = append(errs, field.Invalid(p.Child("caps").Key(cl), n, "must not be negative"))
			}
		}
		if ws.MaxLease.Duration < 0 {
			errs = append(errs, field.Invalid(p.Child("max_lease"), ws.MaxLease.Duration.String(), "must not be negative"))
		}
		if ws.ActiveFrom != nil && ws.ActiveUntil != nil && !ws.ActiveUntil.After(ws.ActiveFrom.Time) {
			errs = append(errs, field.Invalid(p.Child("active_until"), ws.ActiveUntil.String(), "must be after active_from"))
		}
		if ws.Name == OrgOnDemand && ws.OnDemand != nil && !*ws.OnDemand {
			errs = append(errs, field.Invalid(p.Child("on_demand"), false, OrgOnDemand+" is on-demand only"))
		}
	}

	for key, d := range map[string]time.Duration{
		"claim_horizon": c.ClaimHorizon.Duration, "lease_buffer": c.LeaseBuffer.Duration,
		"default_runtime": c.DefaultRuntime.Duration, "full_fallback": c.FullFallback.Duration,
		"no_show_after": c.NoShowAfter.Duration, "no_show_grace": c.NoShowGrace.Duration,
		"event_repeat": c.EventRepeat.Duration, "kill_lead": c.KillLead.Duration,
		"warning_lookahead": c.WarningLookahead.Duration, "headroom_notice": c.HeadroomNotice.Duration,
		"stuck_after": c.StuckAfter.Duration,
	} {
		if d <= 0 {
			errs = append(errs, field.Invalid(root.Child(key), d.String(), "must be positive"))
		}
	}
	if c.WarningLookahead.Duration < c.KillLead.Duration {
		errs = append(errs, field.Invalid(root.Child("warning_lookahead"), c.WarningLookahead.Duration.String(),
			"must be at least kill_lead, so a warning can precede a kill"))
	}
	if p := c.HeadroomPercent; p != nil && (*p < 0 || *p > 100) {
		errs = append(errs, field.Invalid(root.Child("headroom_percent"), *p, "must be between 0 and 100"))
	}
	if _, err := time.LoadLocation(c.TimeZone); err != nil {
		errs = append(errs, field.Invalid(root.Child("time_zone"), c.TimeZone, err.Error()))
	}
	// Map iteration above (durations, selectors, caps) is unordered; sort so
	// one bad config always reports the same way.
	slices.SortStableFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return errs
}
