package hubapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsmlp/spawner/lifecycle"
)

// pollsPath is the batched poll: the hub class sends the polls that fall
// due together (all of them at a hub's start-up, a few at a time in its
// steady state) as one request, so that the per-request cost of HTTP
// (a read and a write system call each way, the token check, the hub's
// own request handling) is paid once for the batch, not once a server.
const pollsPath = "/api/v1/polls"

// maxPollBatch bounds one batched poll; the hub class sends at most its
// poll_batch_size (256 by default).
const maxPollBatch = 1000

// PollRequest is the body of POST /api/v1/polls.
type PollRequest struct {
	Servers []PollItem `json:"servers"`
}

// PollItem is one server to poll and the hub's saved state for it, the
// hint a GET poll takes as its query.
type PollItem struct {
	User string `json:"user"`
	// Server is the server's name; "" is the default server.
	Server    string `json:"server"`
	PodName   string `json:"pod_name"`
	Namespace string `json:"namespace"`
	PodUID    string `json:"pod_uid"`
}

// newBatchedPolls registers spawner_batched_polls_total.
func newBatchedPolls(reg *prometheus.Registry) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spawner_batched_polls_total",
		Help: "Servers polled through POST /api/v1/polls (each batch counts its servers).",
	})
	reg.MustRegister(c)
	return c
}

// batch answers POST /api/v1/polls: each server's answer, in the order
// asked, is exactly what GET on the server's path answers.
func (p *pollPath) batch(c echo.Context) error {
	var body PollRequest
	if err := decodeStrict(c.Request().Body, &body); err != nil {
		return err
	}
	if body.Servers == nil {
		return &apiError{status: http.StatusBadRequest, msg: "servers is required: a list of {user, server, pod_name, namespace, pod_uid}", field: "servers"}
	}
	if len(body.Servers) > maxPollBatch {
		return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf("servers holds %d servers; at most %d a request", len(body.Servers), maxPollBatch), field: "servers"}
	}
	cl := claimsOf(c)
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	// Answered into the buffer as checked: a refused item sends nothing.
	out := append((*bp)[:0], `{"servers":[`...)
	for i := range body.Servers {
		it := &body.Servers[i]
		key := lifecycle.Key{User: it.User, Server: it.Server}
		hint := lifecycle.Hint{Pod: it.PodName, Namespace: it.Namespace, UID: types.UID(it.PodUID)}
		if err := checkPollItem(key, hint, i, cl); err != nil {
			return err
		}
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = p.answer(out, key, hint); err != nil {
			return fmt.Errorf("encoding the answer for user %q server %q: %w", it.User, it.Server, err)
		}
	}
	out = append(out, "]}\n"...)
	*bp = out
	// A length rather than chunks: net/http chunks an answer over 2 KiB
	// that has none.
	h := c.Response().Header()
	h[echo.HeaderContentType] = p.jsonType
	h["Content-Length"] = []string{strconv.Itoa(len(out))}
	c.Response().WriteHeader(http.StatusOK)
	_, err := c.Response().Write(out)
	p.batched.Add(float64(len(body.Servers)))
	return err
}

// checkPollItem refuses what a GET poll would refuse, naming the item's
// field (the name is built only for a refusal, off the poll's path).
func checkPollItem(key lifecycle.Key, hint lifecycle.Hint, i int, cl *Claims) error {
	var err *apiError
	if key.User == "" {
		err = &apiError{status: http.StatusBadRequest, msg: "user name must not be empty", field: "user"}
	} else if e := checkHint(hint); e != nil {
		err = e
	} else if e := checkOwner(cl, key.User, "user"); e != nil {
		err = e
	}
	if err == nil {
		return nil
	}
	err.field = "servers[" + strconv.Itoa(i) + "]." + err.field
	return err
}
