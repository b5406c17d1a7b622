package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
)

//go:embed static templates
var files embed.FS

// staticFiles are the embedded scripts and styles, served under a hash of
// their content so that browsers may keep them for a year.
type staticFiles struct {
	prefix string
	byName map[string]staticFile
}

type staticFile struct {
	hash string
	body []byte
	typ  string
}

// staticHashLen is how many hex digits of the SHA-256 name a version.
const staticHashLen = 12

func loadStatic(prefix string) (staticFiles, error) {
	sf := staticFiles{prefix: prefix, byName: map[string]staticFile{}}
	entries, err := fs.ReadDir(files, "static")
	if err != nil {
		return sf, fmt.Errorf("reading the static files: %w", err)
	}
	for _, e := range entries {
		body, err := files.ReadFile("static/" + e.Name())
		if err != nil {
			return sf, fmt.Errorf("reading static file %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		typ := mime.TypeByExtension(path.Ext(e.Name()))
		if typ == "" {
			typ = "application/octet-stream"
		}
		sf.byName[e.Name()] = staticFile{hash: hex.EncodeToString(sum[:])[:staticHashLen], body: body, typ: typ}
	}
	return sf, nil
}

// url is a static file's versioned URL; templates call it through "static".
func (sf staticFiles) url(name string) (string, error) {
	f, ok := sf.byName[name]
	if !ok {
		return "", fmt.Errorf("no static file %q", name)
	}
	return sf.prefix + "static/" + f.hash + "/" + name, nil
}

// serve answers only the current version of a file: an old page asking a
// newer replica for an old version gets 404 rather than a file that does
// not match it, cached for a year.
func (sf staticFiles) serve(w http.ResponseWriter, r *http.Request) {
	f, ok := sf.byName[r.PathValue("name")]
	if !ok || f.hash != r.PathValue("hash") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.typ)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	_, _ = w.Write(f.body)
}
