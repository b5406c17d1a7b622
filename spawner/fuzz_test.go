package spawner

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds configuration files to the parser: it never panics, and a
// configuration it accepts resolves and renders without panicking.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("kubespawner: {namespace: x, namespace: y}"))
	f.Add([]byte("kubespawner: [1]"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if _, err := cfg.Resolve(nil); err != nil {
			return
		}
		_, _ = RenderAll(cfg, Request{User: "alice", UserID: 1})
	})
}
