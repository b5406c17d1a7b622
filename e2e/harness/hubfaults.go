package harness

import "testing"

// StartAgain starts a stopped hub on the same port and database, e.g.
// after a test held it down: the servers it knew are resumed
// (HUB_CLEANUP_SERVERS=0).
func (h *Hub) StartAgain(t testing.TB) {
	t.Helper()
	h.start(t)
}
