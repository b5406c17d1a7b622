package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dsmlp/spawner/e2e/harness"
)

// loadedAtScript runs in every page the tab opens, before the page's own
// scripts: it notes when the page's main container gets data-loaded (the
// console's scripts set it once the page's data is rendered), in
// milliseconds since the navigation started (performance.now's origin),
// and when the page itself and the data its scripts fetched (the console's
// api/ requests, from resource timing) had arrived.
const loadedAtScript = `(function () {
  function mark() {
    var m = document.getElementById('main');
    if (m && m.hasAttribute('data-loaded') && window.__loadedAt === undefined) {
      var at = performance.now();
      var nav = performance.getEntriesByType('navigation')[0];
      var api = performance.getEntriesByType('resource').filter(function (e) { return e.name.indexOf('/api/') >= 0; });
      window.__timing = {
        html: nav ? nav.responseEnd : 0,
        dataStart: api.length ? Math.min.apply(null, api.map(function (e) { return e.startTime; })) : 0,
        dataEnd: api.length ? Math.max.apply(null, api.map(function (e) { return e.responseEnd; })) : 0,
        loaded: at,
      };
      window.__loadedAt = at;
    }
    return window.__loadedAt !== undefined;
  }
  new MutationObserver(function (_, o) { if (mark()) o.disconnect(); })
    .observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-loaded'] });
})();`

// browser is one headless Chromium tab that notes each page's load time.
type browser struct{ *harness.Browser }

// startBrowser starts Chromium with a profile in dir.
func startBrowser(dir string) (*browser, error) {
	b, err := harness.StartBrowser(dir, loadedAtScript)
	if err != nil {
		return nil, err
	}
	return &browser{b}, nil
}

// login logs in at url (a console page) through the hub's login form and
// waits until the console's page has loaded its data.
func (br *browser) login(url, user, password string) error {
	ctx, cancel := context.WithTimeout(br.Ctx, 2*time.Minute)
	defer cancel()
	if err := br.LogInToHub(ctx, url, user, password); err != nil {
		return err
	}
	// Through the hub's OAuth redirects, to the console's page.
	if err := br.Wait(ctx, `location.pathname !== '/hub/login' && !!document.querySelector('#main[data-loaded]')`); err != nil {
		return fmt.Errorf("after the login the console never loaded (at %s): %w", br.Location(), err)
	}
	return nil
}

// pageTiming is one page load in the browser, each phase's end in
// milliseconds since the navigation started.
type pageTiming struct {
	HTML      float64 `json:"html"`      // the page's HTML received
	DataStart float64 `json:"dataStart"` // its first api/ request sent (a preload's, else a script's)
	DataEnd   float64 `json:"dataEnd"`   // their last answer received
	Loaded    float64 `json:"loaded"`    // #main marked data-loaded: the data rendered
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// load opens url from a blank page and returns when each phase of the
// page's load ended, and the value of check, evaluated once the page was
// marked loaded.
func (br *browser) load(url, check string) (pageTiming, string, error) {
	ctx, cancel := context.WithTimeout(br.Ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(url)); err != nil {
		return pageTiming{}, "", fmt.Errorf("opening %s: %w", url, err)
	}
	// Asked anew each time: an evaluation made while the page replaces
	// about:blank fails, and the next one finds the new page.
	var (
		timing string
		last   error
	)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__timing ? JSON.stringify(window.__timing) : ''`))
		if err != nil {
			last = err
		}
		if timing = v; timing != "" {
			break
		}
		select {
		case <-ctx.Done():
			return pageTiming{}, "", fmt.Errorf("%s never marked loaded: %w (last evaluation error: %v)", url, ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
	var pt pageTiming
	if err := json.Unmarshal([]byte(timing), &pt); err != nil {
		return pageTiming{}, "", fmt.Errorf("%s: the page's timing %q: %w", url, timing, err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](check))
	if err != nil {
		return pageTiming{}, "", fmt.Errorf("%s: %s: %w", url, check, err)
	}
	return pt, got, nil
}
