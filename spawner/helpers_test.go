package spawner

import (
	"errors"
	"testing"
)

func mustParse(t *testing.T, yamlText string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(yamlText))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// errorFields returns the field paths of a *ValidationError.
func errorFields(t *testing.T, err error) []string {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	out := make([]string, len(ve.Errors))
	for i, e := range ve.Errors {
		out[i] = e.Field
	}
	return out
}
