package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/dsmlp/spawner/apiclient"
	"github.com/dsmlp/spawner/hubapi"
)

const adminUsage = `usage: spawnerd admin [--url URL] [--shared-secret-file FILE] [-o table|wide|json] COMMAND [ARG...] [FLAG...]

Servers and sessions:
  servers                       every server: running, starting, and stopped recently (with why)
  servers USER [SERVER]         one server with its last Kubernetes events
  sessions [--user U] [--server S] [--course C] [--class K] [--reason R] [--since T] [--until T]
           [--state ended|running] [--limit N] [--cursor C] [--all]
                                the session history, newest first, one page (--all: every page);
                                T is an RFC 3339 time or a duration back from now (24h); --server ""
                                is the default server; R is a stopper (evicted, user, culler, ...) or
                                a Kubernetes reason (Evicted, OOMKilled)
  sessions UID                  one session with its timeline
  why USER [SERVER]             how the server's last session ended, in one sentence, then its facts

GPU reservations:
  bookings list [--owner U] [--class C] [--workspace W] [--kind booking|on_demand|best_effort] [--state active|cancelled]
  bookings get ID
  bookings create --owner U --workspace W --class C --gpus N --start RFC3339 --end RFC3339
  bookings cancel ID [--by user|other]
  bookings reassign ID --owner U
  classes [--hours H]           capacity, occupancy, queue and pause state per GPU class
  pause CLASS [--reason TEXT]   pause on-demand admission for a class
  resume CLASS
  charges [--since T] [--until T]
                                GPU-hours per workspace (T: RFC 3339 or a duration back from now)
  risk [--hours H]              preemption risk at the booking boundaries ahead

Other:
  token                         print an admin token for curl (good for one request within a minute):
                                curl -H "Authorization: Bearer $(spawnerd admin token)" ...

Flags may come before or after a command's arguments:
  --url URL                     spawnerd's API (else $SPAWNERD_URL, else http://127.0.0.1:8090)
  --shared-secret-file FILE     the secret spawnerd shares with the hub (else $SPAWNERD_SHARED_SECRET)
  -o, --output FORMAT           table (the default), wide (more columns) or json (the API's answer, for scripts)

An error prints the API's message and the input it concerns, and exits with status 1.`

// adminTimeout bounds one API call of the CLI.
const adminTimeout = 30 * time.Second

// admin is the command-line client of spawnerd's admin API: it signs an
// admin token with the shared secret for every call, as the hub does.
func admin(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a := &adminCmd{out: os.Stdout, errOut: os.Stderr, getenv: os.Getenv, now: time.Now,
		httpClient: &http.Client{Timeout: adminTimeout}}
	return a.run(ctx, args)
}

// adminCmd is one run of spawnerd admin.
type adminCmd struct {
	out, errOut io.Writer
	getenv      func(string) string
	now         func() time.Time
	httpClient  *http.Client

	// The flags every command takes.
	url, secretFile, output string
}

// Output formats.
const (
	outputTable = "table"
	outputWide  = "wide"
	outputJSON  = "json"
)

// errUsage marks an error in the command line: the usage follows it.
var errUsage = errors.New("see spawnerd admin -h")

func (a *adminCmd) run(ctx context.Context, args []string) error {
	a.url = a.getenv("SPAWNERD_URL")
	if a.url == "" {
		a.url = "http://127.0.0.1:8090"
	}
	a.output = outputTable
	fs := a.flags("admin")
	if err := fs.Parse(args); err != nil {
		return a.flagError(err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprintln(a.errOut, adminUsage)
		return fmt.Errorf("admin needs a command: %w", errUsage)
	}
	cmd, args := rest[0], rest[1:]
	switch cmd {
	case "servers":
		return a.servers(ctx, args)
	case "sessions":
		return a.sessions(ctx, args)
	case "why":
		return a.why(ctx, args)
	case "bookings":
		return a.bookings(ctx, args)
	case "classes":
		return a.classes(ctx, args)
	case "pause", "resume":
		return a.pause(ctx, cmd, args)
	case "charges":
		return a.charges(ctx, args)
	case "risk":
		return a.risk(ctx, args)
	case "token":
		return a.token(ctx, args)
	case "help":
		fmt.Fprintln(a.out, adminUsage)
		return nil
	}
	return fmt.Errorf("unknown admin command %q: %w", cmd, errUsage)
}

// flags is a command's flag set with the flags every command takes.
func (a *adminCmd) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&a.url, "url", a.url, "spawnerd's API")
	fs.StringVar(&a.secretFile, "shared-secret-file", a.secretFile, "file with the shared secret")
	fs.StringVar(&a.output, "output", a.output, "table, wide or json")
	fs.StringVar(&a.output, "o", a.output, "table, wide or json")
	return fs
}

func (a *adminCmd) flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(a.out, adminUsage)
		return nil
	}
	return fmt.Errorf("%w (%w)", err, errUsage)
}

// parse reads a command's flags and positional arguments in any order and
// checks that there are from atLeast to atMost positional arguments.
func (a *adminCmd) parse(fs *flag.FlagSet, args []string, atLeast, atMost int, what string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, a.flagError(err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// flag stops at the first positional argument, or after "--".
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	switch a.output {
	case outputTable, outputWide, outputJSON:
	default:
		return nil, fmt.Errorf("--output %q is none of table, wide, json: %w", a.output, errUsage)
	}
	if len(pos) < atLeast || len(pos) > atMost {
		return nil, fmt.Errorf("usage: spawnerd admin %s %s: %w", fs.Name(), what, errUsage)
	}
	return pos, nil
}

// client is an admin client of the API the flags name.
func (a *adminCmd) client() (*apiclient.Client, error) {
	secret, err := a.secret()
	if err != nil {
		return nil, err
	}
	return apiclient.New(a.url, apiclient.User{Name: "admin", Admin: true}, apiclient.SharedSecret(secret), apiclient.WithHTTPClient(a.httpClient))
}

func (a *adminCmd) secret() ([]byte, error) {
	if a.secretFile != "" {
		return hubapi.ReadSecret(a.secretFile, "")
	}
	if v := strings.TrimRight(a.getenv("SPAWNERD_SHARED_SECRET"), " \t\r\n"); v != "" {
		return []byte(v), nil
	}
	return nil, errors.New("no shared secret: set --shared-secret-file or $SPAWNERD_SHARED_SECRET")
}

func (a *adminCmd) token(ctx context.Context, args []string) error {
	if _, err := a.parse(a.flags("token"), args, 0, 0, ""); err != nil {
		return err
	}
	secret, err := a.secret()
	if err != nil {
		return err
	}
	tok, err := apiclient.SharedSecret(secret)(ctx, apiclient.User{Name: "admin", Admin: true})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.out, tok)
	return err
}
