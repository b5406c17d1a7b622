package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium is Debian's browser, installed by hack/debian-deps.sh.
const Chromium = "/usr/bin/chromium"

// Browser is one headless Chromium with a profile of its own: its cookies
// (the hub's login, a service's session) are its own, so two Browsers are
// two people.
type Browser struct {
	// Ctx is the tab's context. It has started the browser, so it must
	// carry no timeout: derive one per step with context.WithTimeout.
	Ctx    context.Context
	cancel func()
}

// StartBrowser starts Chromium headless with its profile in dir, in a
// laptop-sized window: narrower, the hub's navigation bar folds its menus
// away. Each of onEveryPage, a script, runs in every page the tab opens,
// before the page's own scripts.
func StartBrowser(dir string, onEveryPage ...string) (*Browser, error) {
	if _, err := os.Stat(Chromium); err != nil {
		return nil, fmt.Errorf("%s is missing (make deps installs it): %w", Chromium, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(dir), chromedp.WindowSize(1366, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &Browser{Ctx: ctx, cancel: func() { cancelTab(); cancelAlloc() }}
	// The first call starts the browser and must carry no timeout of its own.
	steps := []chromedp.Action[chromedp.Void]{chromedp.Navigate("about:blank")}
	for _, src := range onEveryPage {
		steps = append(steps, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			return t.Call(ctx, "Page.addScriptToEvaluateOnNewDocument", map[string]string{"source": src}, nil)
		}))
	}
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.Close()
		return nil, fmt.Errorf("starting %s: %w", Chromium, err)
	}
	return b, nil
}

// Close ends the browser.
func (b *Browser) Close() { b.cancel() }

// LogInToHub opens url, the hub's login page or any page behind the hub's
// login (a service's page sends the browser there through the hub's OAuth),
// and submits the hub's login form as user. It returns once the form is
// sent: wait with Wait for the page the login leads to.
func (b *Browser) LogInToHub(ctx context.Context, url, user, password string) error {
	err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#username_input")),
		chromedp.SendKeys(chromedp.CSS("#username_input"), user),
		chromedp.SendKeys(chromedp.CSS("#password_input"), password),
		chromedp.Click(chromedp.CSS("#login_submit")),
	)
	if err != nil {
		return fmt.Errorf("the hub's login form (from %s) as %s: %w", url, user, err)
	}
	return nil
}

// waitInterval is how often Wait evaluates its condition.
const waitInterval = 100 * time.Millisecond

// Wait evaluates cond, a JavaScript expression, in the tab until it is
// true or ctx ends. A page load ends an evaluation under way, so each try
// is a new evaluation: the condition may span redirects and reloads.
func (b *Browser) Wait(ctx context.Context, cond string) error {
	var last error
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("waiting for %s: %w (last evaluation error: %v)", cond, ctx.Err(), last)
			}
			return fmt.Errorf("waiting for %s: %w", cond, ctx.Err())
		case <-time.After(waitInterval):
		}
	}
}

// Location is the tab's URL, or why it could not be read.
func (b *Browser) Location() string {
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return fmt.Sprintf("(location unknown: %v)", err)
	}
	return loc
}

// HTML is the tab's document, cut to max bytes, for failure messages.
func (b *Browser) HTML(max int) string {
	ctx, cancel := context.WithTimeout(b.Ctx, 10*time.Second)
	defer cancel()
	html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement ? document.documentElement.outerHTML : ''`))
	if err != nil {
		return fmt.Sprintf("(the page's HTML could not be read: %v)", err)
	}
	if len(html) > max {
		html = html[:max] + "\n… (cut)"
	}
	return html
}

// Shot saves a full-page PNG of the tab as name (a file name ending in
// .png) in ShotsDir and returns its path.
func (b *Browser) Shot(name string) (string, error) {
	dir, err := ShotsDir()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", fmt.Errorf("screenshot %s: %w", name, err)
	}
	if len(png) == 0 {
		return "", errors.New("screenshot " + name + ": the browser sent no image")
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", fmt.Errorf("screenshot %s: %w", name, err)
	}
	return path, nil
}

// Explain describes the tab for a failure message: where it is, a
// screenshot saved as name, and the page's HTML.
func (b *Browser) Explain(name string) string {
	shot, err := b.Shot(name)
	if err != nil {
		shot = err.Error()
	}
	return fmt.Sprintf("at %s\nscreenshot: %s\npage:\n%s", b.Location(), shot, b.HTML(12000))
}

var shots struct {
	once sync.Once
	dir  string
	err  error
}

// ShotsDir is where browser tests keep their screenshots: $E2E_SHOTS, else
// a folder spawnerd-console-shots-<timestamp> in the temporary folder, one
// for the whole test binary, kept after the tests so that a CI job can
// collect the files its log names.
func ShotsDir() (string, error) {
	shots.once.Do(func() {
		shots.dir = os.Getenv("E2E_SHOTS")
		if shots.dir == "" {
			shots.dir = filepath.Join(os.TempDir(), "spawnerd-console-shots-"+time.Now().Format("20060102-150405"))
		}
		if err := os.MkdirAll(shots.dir, 0o755); err != nil {
			shots.err = fmt.Errorf("the screenshots folder: %w", err)
		}
	})
	return shots.dir, shots.err
}
