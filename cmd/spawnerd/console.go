package main

import (
	"flag"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/dsmlp/spawner/console"
	"github.com/dsmlp/spawner/spawner"
)

// consoleFlags configure the web console served as a hub service.
type consoleFlags struct {
	prefix, hubPrefix, scope, clientID string
}

func (f *consoleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.prefix, "console-prefix", console.DefaultPrefix,
		"URL prefix of the web console, the hub service's prefix (/services/<name>/); empty: no console. Needs --hub-api-url and the hub token")
	fs.StringVar(&f.hubPrefix, "hub-public-prefix", console.DefaultHubPrefix, "the hub's prefix as browsers reach it (base_url + hub/), for the OAuth login")
	fs.StringVar(&f.scope, "console-scope", console.DefaultConsoleScope, "hub scope that admits a user who is not a hub admin to the console")
	fs.StringVar(&f.clientID, "oauth-client-id", console.DefaultClientID, "the hub's OAuth client ID of spawnerd's service (service-<name>)")
}

// consoleParts are what the console shows and acts on.
type consoleParts struct {
	hubAPI, hubTokenFile string
	// cookieSecret keys the session cookies; every replica has the same.
	cookieSecret []byte
	servers      console.Servers
	history      console.History
	reservations console.Reservations // nil without the GPU engine
	cfg          *spawner.Config
	location     *time.Location
}

// handler wraps api with the console at f.prefix; without a console (no
// prefix, or no hub to log in through) it is api itself.
func (f *consoleFlags) handler(api http.Handler, p consoleParts, log *zap.Logger) (http.Handler, error) {
	if f.prefix == "" {
		return api, nil
	}
	if p.hubAPI == "" {
		log.Info("no console: it logs users in through the hub, and --hub-api-url is not set")
		return api, nil
	}
	token, err := readToken(p.hubTokenFile, "SPAWNERD_HUB_TOKEN")
	if err != nil {
		return nil, fmt.Errorf("the console needs the hub token (its OAuth client secret): %w", err)
	}
	c, err := console.New(console.Options{
		Prefix: f.prefix, HubPrefix: f.hubPrefix, HubAPIURL: p.hubAPI, ClientID: f.clientID, ClientSecret: token,
		ConsoleScope: f.scope, CookieSecret: p.cookieSecret,
		Servers: p.servers, History: p.history, Reservations: p.reservations,
		OwnerOf: ownerOf(p.cfg), Location: p.location,
		HTTPClient: &http.Client{Timeout: 10 * time.Second}, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(f.prefix, c)
	mux.Handle("/", api)
	log.Info("console served", zap.String("prefix", f.prefix), zap.String("hub_prefix", f.hubPrefix))
	return mux, nil
}

// ownerOf maps a hub user to the owner of their GPU bookings: the
// namespace their default server's pod goes to.
func ownerOf(cfg *spawner.Config) func(string) string {
	return func(user string) string {
		objs, _, err := spawner.Build(cfg, spawner.Request{User: user})
		if err != nil {
			return user
		}
		return objs.Pod.Namespace
	}
}
