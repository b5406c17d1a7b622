package spawner

import (
	"encoding/json"
	"sync"
)

// maxResolved bounds the resolve cache: free-text options (unlisted
// choices) could otherwise grow it without end. Past it the cache starts
// over, which costs a Resolve per spawn until it refills.
const maxResolved = 1024

// resolveCache maps a canonical encoding of user_options to its settings.
type resolveCache struct {
	mu sync.RWMutex
	m  map[string]*Settings
}

func (r *resolveCache) get(key string) (*Settings, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.m[key]
	return s, ok
}

func (r *resolveCache) put(key string, s *Settings) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxResolved {
		r.m = make(map[string]*Settings)
	}
	r.m[key] = s
}

// resolveKey is user_options in a canonical form (encoding/json sorts map
// keys); false when they cannot be encoded, and so are not cached.
func resolveKey(opts map[string]any) (string, bool) {
	if len(opts) == 0 {
		return "", true
	}
	raw, err := json.Marshal(opts)
	if err != nil {
		return "", false
	}
	return string(raw), true
}
