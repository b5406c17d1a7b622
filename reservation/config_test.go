package reservation

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{
		"classes": [{"label": "medium", "node_selector": {"gpu-type": "medium"}}],
		"workspaces": [{"name": "DSC10", "classes": ["medium"], "caps": {"medium": 2}, "max_lease": "6h"}],
		"claim_horizon": "20m", "headroom_percent": 0, "best_effort": true
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClaimHorizon.Duration != 20*time.Minute || *cfg.HeadroomPercent != 0 || !cfg.BestEffort {
		t.Errorf("explicit values lost: %+v", cfg)
	}
	if cfg.LeaseBuffer.Duration != 10*time.Minute || cfg.AnnotationPrefix != "galends/" || cfg.TimeZone != "America/Los_Angeles" ||
		cfg.Classes[0].DisplayName != "medium" || !*cfg.Workspaces[0].OnDemand || !*cfg.WaitForScheduler {
		t.Errorf("defaults missing: %+v", cfg)
	}
	if cfg.Workspaces[0].MaxLease.Duration != 6*time.Hour {
		t.Errorf("max_lease = %v", cfg.Workspaces[0].MaxLease)
	}
}

// Every problem is reported, each naming its key.
func TestParseConfigErrors(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string
	}{
		"unknown key": {
			in:   `{"classes": [{"label": "medium"}], "clas": 1}`,
			want: []string{`unknown field "clas"`},
		},
		"every bad value": {
			in: `{"annotation_prefix": "galends", "classes": [{"label": "medium"}, {"label": "medium"}, {"label": ""}],
				"workspaces": [{"name": "W", "classes": ["large"], "caps": {"medium": -1}}, {"name": "W"}],
				"kill_lead": "40m", "headroom_percent": 120, "time_zone": "Mars/Olympus"}`,
			want: []string{
				"reservation.annotation_prefix", "reservation.classes[1].label: Duplicate value", "reservation.classes[2].label: Required value",
				"reservation.workspaces[0].classes[0]: Not found", "reservation.workspaces[0].caps[medium]: Invalid value",
				"reservation.workspaces[1].name: Duplicate value", "reservation.warning_lookahead", "reservation.headroom_percent",
				"reservation.time_zone",
			},
		},
		"no classes": {in: `{}`, want: []string{"reservation.classes: Required value"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{Classes: []GPUClass{{Label: "a b"}}}); err == nil || !strings.Contains(err.Error(), "reservation.classes[0].label") {
		t.Errorf("New accepted an invalid label: %v", err)
	}
}
