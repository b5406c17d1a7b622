package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/dsmlp/spawner/lifecycle"
)

// serverRow is one server of the servers list, as the page's script reads
// it. It carries absolute times only, so that an unchanged list has an
// unchanged ETag; the script computes ages.
type serverRow struct {
	User   string `json:"user"`
	Server string `json:"server"`
	// Status is the lifecycle status: running, pending, stopped, absent.
	Status string `json:"status"`
	// Waiting: pending, of a GPU class, and not admitted by the engine.
	Waiting     bool   `json:"waiting,omitempty"`
	Phase       string `json:"phase,omitempty"`
	Message     string `json:"message,omitempty"`
	Pod         string `json:"pod,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Node        string `json:"node,omitempty"`
	Profile     string `json:"profile,omitempty"`
	Course      string `json:"course,omitempty"`
	GPUClass    string `json:"gpu_class,omitempty"`
	Reservation string `json:"reservation,omitempty"`
	Guarantee   string `json:"guarantee_status,omitempty"`
	Created     string `json:"created,omitempty"` // RFC 3339
	CreatedText string `json:"created_text,omitempty"`
	// Reason is why a stopped server stopped, in a word (Evicted,
	// OOMKilled, culler, ...).
	Reason    string    `json:"reason,omitempty"`
	LastEvent *eventRow `json:"last_event,omitempty"`
	Stopped   *stopRow  `json:"stopped,omitempty"`
	// URL is the server's detail page.
	URL string `json:"url"`
}

type eventRow struct {
	Time     string `json:"time"`
	TimeText string `json:"time_text"`
	Type     string `json:"type,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

type stopRow struct {
	At              string `json:"at,omitempty"`
	AtText          string `json:"at_text,omitempty"`
	Stopper         string `json:"stopper,omitempty"`
	Reason          string `json:"reason,omitempty"`
	ContainerReason string `json:"container_reason,omitempty"`
	ExitCode        int    `json:"exit_code"`
	Why             string `json:"why,omitempty"`
}

// serverList is the JSON of GET api/servers.
type serverList struct {
	Servers []serverRow `json:"servers"`
}

// waiting reports whether a server waits for a GPU: its pod is pending
// with a GPU class and no reservation yet (the engine admits by writing
// the booking reference).
func waiting(s *lifecycle.Server) bool {
	return s.Status == lifecycle.StatusPending && s.GPUClass != "" && s.Reservation == ""
}

// stopWord is why a server stopped, in a word: the Kubernetes reason,
// else the container's, else who stopped it.
func stopWord(st *lifecycle.StopReason) string {
	switch {
	case st == nil:
		return ""
	case st.Reason != "":
		return st.Reason
	case st.ContainerReason != "":
		return st.ContainerReason
	}
	return st.Stopper
}

func (h *handler) rowOf(s *lifecycle.Server) serverRow {
	row := serverRow{User: s.User, Server: s.Server, Status: s.Status, Waiting: waiting(s), Phase: s.Phase,
		Message: s.Message, Pod: s.Pod, Namespace: s.Namespace, Node: s.Node, Profile: s.Profile, Course: s.Course,
		GPUClass: s.GPUClass, Reservation: s.Reservation, Guarantee: s.GuaranteeStatus, URL: h.serverPath(s.User, s.Server)}
	if s.Created != nil {
		row.Created, row.CreatedText = s.Created.UTC().Format(time.RFC3339), h.fmtTime(*s.Created)
	}
	if ev := s.LastEvent; ev != nil {
		row.LastEvent = &eventRow{Time: ev.Time.UTC().Format(time.RFC3339), TimeText: h.fmtTime(ev.Time), Type: ev.Type,
			Reason: ev.Reason, Message: ev.Message}
	}
	if st := s.Stopped; st != nil {
		row.Reason = stopWord(st)
		row.Stopped = &stopRow{Stopper: st.Stopper, Reason: st.Reason, ContainerReason: st.ContainerReason,
			ExitCode: st.ExitCode, Why: st.Why}
		if !st.At.IsZero() {
			row.Stopped.At, row.Stopped.AtText = st.At.UTC().Format(time.RFC3339), h.fmtTime(st.At)
		}
	}
	return row
}

// listCache keeps the servers and their encoded list for listFresh, so
// that every open console polling every 2 s costs one List per second at
// most; and each server's encoded row by its Rev, so that a new list
// encodes only the servers that changed.
type listCache struct {
	mu      sync.Mutex
	at      time.Time
	servers []*lifecycle.Server
	t       *tagged
	rows    map[lifecycle.Key]keptRow
}

// keptRow is a server's encoded row, made of its report of that Rev.
type keptRow struct {
	rev  uint64
	json []byte
}

const listFresh = time.Second

// serverList returns the servers and their encoded list, from the cache
// when fresh. Callers wait on the lock while one of them lists: polls
// collapse into one List.
func (h *handler) serverList() ([]*lifecycle.Server, *tagged, error) {
	c := h.list
	c.mu.Lock()
	defer c.mu.Unlock()
	now := h.now()
	if c.t != nil && !now.Before(c.at) && now.Sub(c.at) < listFresh {
		return c.servers, c.t, nil
	}
	srvs := h.opts.Servers.List()
	body, err := h.encodeList(srvs)
	if err != nil {
		return nil, nil, err
	}
	// An unchanged list keeps its tag and compressed copy.
	if c.t == nil || !bytes.Equal(c.t.body, body) {
		c.t = newTagged(body)
	}
	c.servers, c.at = srvs, now
	return c.servers, c.t, nil
}

// encodeList encodes srvs as json.Marshal encodes their serverList,
// reusing the rows kept of the same Rev; c.mu must be held.
func (h *handler) encodeList(srvs []*lifecycle.Server) ([]byte, error) {
	c := h.list
	size := 64
	if c.t != nil {
		size = len(c.t.body) + len(c.t.body)/8
	}
	rows := make(map[lifecycle.Key]keptRow, len(srvs))
	body := append(make([]byte, 0, size), `{"servers":[`...)
	for i, s := range srvs {
		if i > 0 {
			body = append(body, ',')
		}
		key := lifecycle.Key{User: s.User, Server: s.Server}
		row, ok := c.rows[key]
		if !ok || s.Rev == 0 || row.rev != s.Rev {
			data, err := json.Marshal(h.rowOf(s))
			if err != nil {
				return nil, fmt.Errorf("encoding the servers list: %s's row: %w", s.User, err)
			}
			row = keptRow{rev: s.Rev, json: data}
		}
		if s.Rev != 0 {
			rows[key] = row
		}
		body = append(body, row.json...)
	}
	c.rows = rows
	return append(body, "]}"...), nil
}

// serversJSON is GET api/servers: every server, 304 when unchanged.
func (h *handler) serversJSON(w http.ResponseWriter, r *http.Request, _ *session) error {
	_, t, err := h.serverList()
	if err != nil {
		return err
	}
	serveTagged(w, r, "application/json", t)
	return nil
}

// serversPage is the page shell; its script loads and filters the list.
func (h *handler) serversPage(w http.ResponseWriter, r *http.Request, s *session) error {
	v := h.layout(r, s, "Servers", "servers")
	api := h.opts.Prefix + "api/servers"
	v.Scripts, v.Preload, v.Loaded = []string{"servers.js"}, []string{api}, false
	h.render(w, r, http.StatusOK, "servers", v, struct{ API string }{api})
	return nil
}
