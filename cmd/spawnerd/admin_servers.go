package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/history"
	"github.com/dsmlp/spawner/hubapi"
	"github.com/dsmlp/spawner/lifecycle"
)

// servers lists every server, or shows one with its events.
func (a *adminCmd) servers(ctx context.Context, args []string) error {
	pos, err := a.parse(a.flags("servers"), args, 0, 2, "[USER [SERVER]]")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		server := ""
		if len(pos) == 2 {
			server = pos[1]
		}
		s, err := c.Server(ctx, pos[0], server)
		if err != nil {
			return err
		}
		if a.output == outputJSON {
			return a.printJSON(s)
		}
		return a.describeServer(s)
	}
	list, err := c.ListServers(ctx)
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		return a.printJSON(list)
	}
	return printTable(a, "servers", []column[*lifecycle.Server]{
		{header: "USER", cell: func(s *lifecycle.Server) string { return s.User }},
		{header: "SERVER", cell: func(s *lifecycle.Server) string { return s.Server }},
		{header: "STATUS", cell: func(s *lifecycle.Server) string { return s.Status }},
		{header: "POD", cell: func(s *lifecycle.Server) string { return s.Pod }, wide: true},
		{header: "NAMESPACE", cell: func(s *lifecycle.Server) string { return s.Namespace }, wide: true},
		{header: "PROFILE", cell: func(s *lifecycle.Server) string { return s.Profile }},
		{header: "COURSE", cell: func(s *lifecycle.Server) string { return s.Course }},
		{header: "CLASS", cell: func(s *lifecycle.Server) string { return s.GPUClass }, wide: true},
		{header: "RESERVATION", cell: func(s *lifecycle.Server) string { return reservationOf(s) }, wide: true},
		{header: "NODE", cell: func(s *lifecycle.Server) string { return s.Node }},
		{header: "IP", cell: func(s *lifecycle.Server) string { return s.PodIP }, wide: true},
		{header: "AGE", cell: func(s *lifecycle.Server) string { return a.agePtr(s.Created) }},
		{header: "STOPPER", cell: func(s *lifecycle.Server) string { return stopperOf(s) }},
		{header: "IMAGE", cell: func(s *lifecycle.Server) string { return s.Image }, wide: true},
		{header: "MESSAGE", cell: serverMessage},
	}, list.Servers)
}

func stopperOf(s *lifecycle.Server) string {
	if s.Stopped == nil {
		return ""
	}
	return s.Stopped.Stopper
}

func reservationOf(s *lifecycle.Server) string {
	if s.Reservation != "" && s.GuaranteeStatus != "" {
		return s.Reservation + " (" + s.GuaranteeStatus + ")"
	}
	return s.Reservation
}

// serverMessage is what a server's row says: why it stopped, what its
// pod's last event says while it starts, or the server's message.
func serverMessage(s *lifecycle.Server) string {
	switch {
	case s.Stopped != nil && s.Stopped.Why != "":
		return s.Stopped.Why
	case s.Status == lifecycle.StatusPending && s.LastEvent != nil:
		return s.LastEvent.Reason + ": " + s.LastEvent.Message
	}
	return s.Message
}

// describeServer prints one server as kubectl describe would.
func (a *adminCmd) describeServer(s *lifecycle.Server) error {
	f := newFields(a.out)
	f.keep("User", s.User)
	f.keep("Server", serverName(s.Server))
	f.keep("Status", s.Status)
	if s.URL != nil {
		f.add("URL", *s.URL)
	}
	if s.Stopped == nil || s.Message != s.Stopped.Why {
		f.add("Message", s.Message)
	}
	f.keep("Pod", s.Namespace+"/"+s.Pod)
	f.add("UID", s.UID)
	f.add("Phase", s.Phase)
	f.keep("Node", s.Node)
	f.add("IP", s.PodIP)
	f.add("Created", a.when(s.Created))
	f.add("Profile", s.Profile)
	f.add("Image", s.Image)
	f.add("Course", s.Course)
	f.add("GPU class", s.GPUClass)
	f.add("Reservation", reservationOf(s))
	if s.ExitCode != nil && s.Stopped == nil {
		f.add("Exit code", strconv.Itoa(*s.ExitCode))
	}
	if st := s.Stopped; st != nil {
		f.keep("Stopped", st.Why)
		f.keep("  Stopper", st.Stopper)
		f.add("  Phase", st.Phase)
		f.add("  Reason", st.Reason)
		f.add("  Message", st.Message)
		f.add("  Container reason", st.ContainerReason)
		f.keep("  Exit code", strconv.Itoa(st.ExitCode))
		f.keep("  At", a.when(&st.At))
		f.keep("  Pod deleted", strconv.FormatBool(st.PodDeleted))
	}
	if sp := s.Spark; sp != nil {
		f.keep("Spark", fmt.Sprintf("%s, master ready %t, %d of %d workers ready", sp.MasterURL, sp.MasterReady, sp.ReadyWorkers, sp.Workers))
		f.add("  UI", sp.UIURL)
		f.add("  Problem", sp.Problem)
		for _, p := range sp.Pods {
			state := p.Phase
			if p.Reason != "" {
				state += " (" + p.Reason + ")"
			}
			f.keep("  "+p.Role, fmt.Sprintf("%s %s on %s, %d restarts", p.Name, state, cell(p.Node), p.Restarts))
		}
		for _, r := range sp.Replaced {
			f.keep("  replaced", fmt.Sprintf("%s (%s) %s %s %s", r.Pod, r.Role, r.Phase, r.Reason, a.when(&r.At)))
		}
	}
	if err := f.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.out, "Events:")
	if len(s.Events) == 0 {
		fmt.Fprintln(a.out, "  <none>")
		return nil
	}
	return a.indented(func(in *adminCmd) error {
		return printTable(in, "events", []column[lifecycle.EventSummary]{
			{header: "AGE", cell: func(e lifecycle.EventSummary) string { return a.age(e.Time) }},
			{header: "TYPE", cell: func(e lifecycle.EventSummary) string { return e.Type }},
			{header: "REASON", cell: func(e lifecycle.EventSummary) string { return e.Reason }},
			{header: "FROM", cell: func(e lifecycle.EventSummary) string { return e.From }},
			{header: "MESSAGE", cell: func(e lifecycle.EventSummary) string { return e.Message }},
		}, s.Events)
	})
}

// optString is a string flag that knows whether it was given, for
// --server, where "" (the default server) differs from any server.
type optString struct {
	v   string
	set bool
}

func (o *optString) String() string     { return o.v }
func (o *optString) Set(v string) error { o.v, o.set = v, true; return nil }

// sessions lists the session history, or shows one session.
func (a *adminCmd) sessions(ctx context.Context, args []string) error {
	fs := a.flags("sessions")
	var f apiclient.SessionFilter
	var server optString
	var state string
	fs.StringVar(&f.User, "user", "", "")
	fs.Var(&server, "server", "")
	fs.StringVar(&f.Course, "course", "", "")
	fs.StringVar(&f.Class, "class", "", "")
	fs.StringVar(&f.Reason, "reason", "", "")
	fs.StringVar(&f.Since, "since", "", "")
	fs.StringVar(&f.Until, "until", "", "")
	fs.StringVar(&state, "state", "", "")
	fs.IntVar(&f.Limit, "limit", 0, "")
	fs.StringVar(&f.Cursor, "cursor", "", "")
	all := fs.Bool("all", false, "")
	pos, err := a.parse(fs, args, 0, 1, "[UID] [--user U] [--server S] [--course C] [--class K] [--reason R] [--since T] [--until T] [--state ended|running] [--limit N] [--all]")
	if err != nil {
		return err
	}
	if server.set {
		f.Server = &server.v
	}
	f.State = apiclient.SessionState(state)
	c, err := a.client()
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		d, err := c.Session(ctx, pos[0])
		if err != nil {
			return err
		}
		if a.output == outputJSON {
			return a.printJSON(d)
		}
		return a.describeSession(d)
	}
	var page *history.SessionPage
	if *all {
		page = &history.SessionPage{Sessions: []history.Session{}}
		for s, err := range c.AllSessions(ctx, f) {
			if err != nil {
				return err
			}
			page.Sessions = append(page.Sessions, s)
		}
	} else if page, err = c.Sessions(ctx, f); err != nil {
		return err
	}
	if a.output == outputJSON {
		return a.printJSON(page)
	}
	if err := printTable(a, "sessions", []column[history.Session]{
		{header: "STARTED", cell: func(s history.Session) string { return a.age(s.Started) }},
		{header: "USER", cell: func(s history.Session) string { return s.User }},
		{header: "SERVER", cell: func(s history.Session) string { return s.Server }},
		{header: "PROFILE", cell: func(s history.Session) string { return s.Profile }},
		{header: "COURSE", cell: func(s history.Session) string { return s.Course }},
		{header: "CLASS", cell: func(s history.Session) string { return s.GPUClass }},
		{header: "NODE", cell: func(s history.Session) string { return s.Node }},
		{header: "ENDED", cell: func(s history.Session) string { return a.agePtr(s.EndedAt) }},
		{header: "STOPPER", cell: func(s history.Session) string { return string(s.Stopper) }},
		{header: "REASON", cell: endReason},
		{header: "EXIT", cell: func(s history.Session) string { return exitCode(s.End) }, wide: true},
		{header: "POD", cell: func(s history.Session) string { return s.Namespace + "/" + s.Pod }, wide: true},
		{header: "RESERVATION", cell: func(s history.Session) string { return s.Reservation }, wide: true},
		{header: "UID", cell: func(s history.Session) string { return s.UID }, wide: true},
	}, page.Sessions); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(a.errOut, "More sessions: add --all, or --cursor %s for the next page.\n", page.Next)
	}
	return nil
}

// endReason is the Kubernetes reason of a session's end: the pod's
// (Evicted), else the notebook container's (OOMKilled).
func endReason(s history.Session) string {
	if s.End == nil {
		return ""
	}
	if s.End.Reason != "" {
		return s.End.Reason
	}
	return s.End.ContainerReason
}

func exitCode(e *history.EndFacts) string {
	if e == nil || e.ExitCode == nil {
		return ""
	}
	return strconv.Itoa(*e.ExitCode)
}

func actorOf(a *history.Actor) string {
	switch {
	case a == nil:
		return ""
	case a.Name == "":
		return string(a.Kind)
	}
	return string(a.Kind) + " " + a.Name
}

// describeSession prints one session and its timeline.
func (a *adminCmd) describeSession(d *hubapi.SessionDetail) error {
	s := d.Session
	f := newFields(a.out)
	f.keep("Session", s.UID)
	f.keep("User", s.User)
	f.keep("Server", serverName(s.Server))
	f.keep("Pod", s.Namespace+"/"+s.Pod)
	f.keep("Node", s.Node)
	f.add("Profile", s.Profile)
	f.add("Image", s.Image)
	f.add("Course", s.Course)
	f.add("GPU class", s.GPUClass)
	if s.Reservation != "" {
		f.add("Reservation", strings.TrimSpace(s.Reservation+" "+parens(s.ReservationKind)))
	}
	f.keep("Started", a.when(&s.Started))
	f.keep("Ended", a.when(s.EndedAt))
	f.add("Stopper", string(s.Stopper))
	f.keep("Why", s.Why)
	if err := f.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.out, "Events:")
	if len(d.Events) == 0 {
		fmt.Fprintln(a.out, "  <none>")
		return nil
	}
	return a.indented(func(in *adminCmd) error {
		return printTable(in, "events", []column[history.Event]{
			{header: "AT", cell: func(e history.Event) string { return e.At.UTC().Format("2006-01-02T15:04:05Z07:00") }},
			{header: "AGE", cell: func(e history.Event) string { return a.age(e.At) }},
			{header: "KIND", cell: func(e history.Event) string { return string(e.Kind) }},
			{header: "DETAIL", cell: eventDetail},
		}, d.Events)
	})
}

func parens(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// eventDetail is what a timeline event carries, in a few words.
func eventDetail(e history.Event) string {
	var parts []string
	if e.By != nil {
		parts = append(parts, "by "+actorOf(e.By))
	}
	if e.Node != "" {
		parts = append(parts, "on node "+e.Node)
	}
	if e.Stopper != "" {
		parts = append(parts, "stopper "+string(e.Stopper))
	}
	if end := e.End; end != nil {
		for _, kv := range [][2]string{{"phase", end.Phase}, {"reason", end.Reason}, {"container", end.ContainerReason}, {"exit code", exitCode(end)}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+" "+kv[1])
			}
		}
	}
	return strings.Join(parts, ", ")
}

// why prints how a server's last session ended: the sentence, then the
// facts it rests on, one per line.
func (a *adminCmd) why(ctx context.Context, args []string) error {
	pos, err := a.parse(a.flags("why"), args, 1, 2, "USER [SERVER]")
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	server := ""
	if len(pos) == 2 {
		server = pos[1]
	}
	w, err := c.Why(ctx, pos[0], server)
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		return a.printJSON(w)
	}
	s := w.Session
	end := history.EndFacts{}
	if s.End != nil {
		end = *s.End
	}
	fmt.Fprintln(a.out, cell(w.Sentence))
	f := newFields(a.out)
	f.keep("Stopper", string(s.Stopper))
	f.add("Stop asked by", actorOf(s.StopRequestedBy))
	f.keep("Phase", end.Phase)
	f.keep("Reason", end.Reason)
	f.add("Message", end.Message)
	f.keep("Container reason", end.ContainerReason)
	f.keep("Exit code", exitCode(s.End))
	f.keep("Node", s.Node)
	f.keep("Ended at", a.when(s.EndedAt))
	f.keep("Session", s.UID)
	return f.flush()
}

// indented runs print with the output going two spaces in, for a table
// inside a description.
func (a *adminCmd) indented(print func(*adminCmd) error) error {
	var buf bytes.Buffer
	in := *a
	in.out = &buf
	if err := print(&in); err != nil {
		return err
	}
	for line := range strings.Lines(buf.String()) {
		if _, err := io.WriteString(a.out, "  "+line); err != nil {
			return err
		}
	}
	return nil
}
