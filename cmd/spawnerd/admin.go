package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dsmlp/spawner/hubapi"
)

const adminUsage = `usage: spawnerd admin [--url URL] [--shared-secret-file FILE] COMMAND
  servers [USER [SERVER]]       every server as a table, or one server (with its last events) as JSON
  token                         print an admin token (valid 1 min) for curl: -H "Authorization: Bearer $TOKEN"
  bookings list [--owner U] [--class C] [--kind K] [--state S]
  bookings create --owner U --workspace W --class C --gpus N --start RFC3339 --end RFC3339
  bookings cancel ID [--by user|other]
  bookings reassign ID --owner U
  classes [--hours H]           capacity, occupancy, queue, pause state
  pause CLASS [--reason TEXT]   pause on-demand admission for a class
  resume CLASS
  charges [--since T] [--until T]
  risk [--hours H]              preemption risk at booking boundaries ahead`

// admin is the command-line client of the reservation admin API: it signs
// an admin token with the shared secret, as the hub does for its calls.
func admin(args []string) error {
	fs := flag.NewFlagSet("admin", flag.ExitOnError)
	base := fs.String("url", envOr("SPAWNERD_URL", "http://127.0.0.1:8090"), "spawnerd's API (else $SPAWNERD_URL)")
	secretFile := fs.String("shared-secret-file", "", "file with the shared secret (else $SPAWNERD_SHARED_SECRET)")
	fs.Usage = func() { fmt.Fprintln(os.Stderr, adminUsage) }
	_ = fs.Parse(args)
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("admin needs a command")
	}
	secret, err := hubapi.ReadSecret(*secretFile, "SPAWNERD_SHARED_SECRET")
	if err != nil {
		return err
	}
	c := &adminClient{base: strings.TrimSuffix(*base, "/") + "/api/v1", secret: secret, out: os.Stdout}
	switch cmd, sub := rest[0], rest[1:]; cmd {
	case "servers":
		return c.servers(sub)
	case "token":
		tok, err := hubapi.Sign(secret, "admin", true, time.Now())
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(c.out, tok)
		return err
	case "bookings":
		if len(sub) == 0 {
			return errors.New("bookings needs list, create, cancel or reassign")
		}
		return c.bookings(sub[0], sub[1:])
	case "classes":
		hours := sub0Flags(sub, "hours", "6")
		return c.show(http.MethodGet, "/gpu-classes?hours="+url.QueryEscape(hours["hours"]), nil)
	case "risk":
		hours := sub0Flags(sub, "hours", "6")
		return c.show(http.MethodGet, "/preemption-risk?hours="+url.QueryEscape(hours["hours"]), nil)
	case "charges":
		f := sub0Flags(sub, "since", "", "until", "")
		q := url.Values{}
		for k, v := range f {
			if v != "" {
				q.Set(k, v)
			}
		}
		return c.show(http.MethodGet, "/charges?"+q.Encode(), nil)
	case "pause", "resume":
		if len(sub) == 0 {
			return fmt.Errorf("%s needs a class", cmd)
		}
		class := url.PathEscape(sub[0])
		if cmd == "resume" {
			return c.show(http.MethodDelete, "/gpu-classes/"+class+"/pause", nil)
		}
		f := sub0Flags(sub[1:], "reason", "")
		return c.show(http.MethodPut, "/gpu-classes/"+class+"/pause", hubapi.PauseRequest{Reason: f["reason"]})
	}
	fs.Usage()
	return fmt.Errorf("unknown admin command %q", rest[0])
}

// sub0Flags parses --name value flags with defaults given as name, default pairs.
func sub0Flags(args []string, pairs ...string) map[string]string {
	fs := flag.NewFlagSet("admin", flag.ExitOnError)
	vals := map[string]*string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		vals[pairs[i]] = fs.String(pairs[i], pairs[i+1], "")
	}
	_ = fs.Parse(args)
	out := map[string]string{}
	for k, v := range vals {
		out[k] = *v
	}
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type adminClient struct {
	base   string
	secret []byte
	out    io.Writer
}

// servers lists every server as a table, or shows one as JSON.
func (c *adminClient) servers(args []string) error {
	if len(args) > 0 {
		path := "/servers/" + url.PathEscape(args[0])
		if len(args) > 1 && args[1] != "" {
			path += "/" + url.PathEscape(args[1])
		}
		return c.show(http.MethodGet, path, nil)
	}
	var list hubapi.ServerList
	if err := c.call(http.MethodGet, "/servers", nil, &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tSERVER\tSTATUS\tPOD\tNAMESPACE\tNODE\tAGE\tMESSAGE")
	for _, s := range list.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.User, orDash(s.Server), s.Status, s.Pod, s.Namespace,
			orDash(s.Node), orDash(s.Age), s.Message)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *adminClient) bookings(cmd string, args []string) error {
	switch cmd {
	case "list":
		f := sub0Flags(args, "owner", "", "class", "", "kind", "", "state", "")
		q := url.Values{}
		for k, v := range f {
			if v != "" {
				q.Set(k, v)
			}
		}
		var list hubapi.ReservationList
		if err := c.call(http.MethodGet, "/reservations?"+q.Encode(), nil, &list); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tOWNER\tWORKSPACE\tCLASS\tGPUS\tSTART\tEND\tSTATUS")
		for _, r := range list.Reservations {
			st := string(r.Status)
			if r.CancelReason != "" {
				st += " (" + string(r.CancelReason) + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Kind, r.Owner, r.Workspace, r.Class, r.GPUs,
				r.Start.UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339), st)
		}
		return tw.Flush()
	case "create":
		f := sub0Flags(args, "owner", "", "workspace", "", "class", "", "gpus", "1", "start", "", "end", "")
		var gpus int
		if _, err := fmt.Sscan(f["gpus"], &gpus); err != nil {
			return fmt.Errorf("--gpus %q is not a number", f["gpus"])
		}
		return c.show(http.MethodPost, "/reservations", hubapi.BookingRequest{Owner: f["owner"], Workspace: f["workspace"],
			Class: f["class"], GPUs: gpus, Start: f["start"], End: f["end"]})
	case "cancel", "reassign":
		if len(args) == 0 {
			return fmt.Errorf("bookings %s needs an ID", cmd)
		}
		id := url.PathEscape(args[0])
		if cmd == "cancel" {
			f := sub0Flags(args[1:], "by", "other")
			return c.show(http.MethodDelete, "/reservations/"+id+"?reason="+url.QueryEscape(f["by"]), nil)
		}
		f := sub0Flags(args[1:], "owner", "")
		return c.show(http.MethodPost, "/reservations/"+id+"/reassign", hubapi.ReassignRequest{Owner: f["owner"]})
	}
	return fmt.Errorf("unknown bookings command %q", cmd)
}

// show calls the API and prints the JSON answer (nothing for 204).
func (c *adminClient) show(method, path string, body any) error {
	var out json.RawMessage
	if err := c.call(method, path, body, &out); err != nil {
		return err
	}
	if len(out) == 0 {
		fmt.Fprintln(c.out, "ok")
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := c.out.Write(buf.Bytes())
	return err
}

func (c *adminClient) call(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return err
	}
	tok, err := hubapi.Sign(c.secret, "admin", true, time.Now())
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("calling spawnerd: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var eb hubapi.ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			if eb.Field != "" {
				return fmt.Errorf("%s (field %s, HTTP %d)", eb.Error, eb.Field, resp.StatusCode)
			}
			return fmt.Errorf("%s (HTTP %d)", eb.Error, resp.StatusCode)
		}
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if len(data) == 0 {
		return nil
	}
	return json.Unmarshal(data, out)
}
