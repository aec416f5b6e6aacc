package main

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

//go:embed probe.js
var probeJS string

// startBrowser starts headless Chromium with WebGL on SwiftShader (as e2e/browser_test.go
// does), so that each page picks its renderer itself. stop ends it.
func startBrowser(cfg config, dataDir string) (ctx context.Context, stop func(), err error) {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(cfg.Chromium),
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Headless,
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("use-angle", "swiftshader"),
		chromedp.Flag("enable-unsafe-swiftshader", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.WindowSize(cfg.Width, cfg.Height),
		chromedp.UserDataDir(dataDir),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	stop = func() {
		cancelB()
		cancelA()
	}
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start chromium: %w", err)
	}
	return bctx, stop, nil
}

// tab is one page target.
type tab struct {
	ctx   context.Context
	close func()
}

// openPage opens url in a new tab of the browser context of parent (a fresh one when fresh),
// with cfg.pageJS evaluated before the page's scripts, and waits for its terminal's prompt.
func openPage(parent context.Context, cfg config, url string, fresh bool) (*tab, error) {
	var opts []chromedp.ContextOption
	if fresh {
		opts = append(opts, chromedp.WithNewBrowserContext())
	}
	ctx, cancel := chromedp.NewContext(parent, opts...)
	t := &tab{ctx: ctx, close: cancel}
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: cfg.pageJS}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true})
		return err
	}))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("prepare the page: %w", err)
	}
	nctx, ncancel := context.WithTimeout(ctx, 30*time.Second)
	err = chromedp.Do(nctx, chromedp.Navigate(url))
	ncancel()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open %s: %w", strings.Split(url, "token=")[0], err)
	}
	if err := t.waitJS("window.__pb.ready()", 20*time.Second); err != nil {
		cancel()
		return nil, err
	}
	if err := t.prompt(); err != nil {
		cancel()
		return nil, err
	}
	return t, nil
}

// prompt focuses the visible terminal and waits for an empty prompt row.
func (t *tab) prompt() error {
	if _, err := evalT[string](t, "window.__pb.focus()", 10*time.Second); err != nil {
		return err
	}
	if err := t.waitJS("window.__pb.hasRow('$ ')", 20*time.Second); err != nil {
		screen, _ := evalT[string](t, "window.__pb.screen()", 5*time.Second)
		return fmt.Errorf("%w; the screen reads %q", err, screen)
	}
	return nil
}

func evalT[T any](t *tab, expr string, d time.Duration) (T, error) {
	ctx, cancel := context.WithTimeout(t.ctx, d)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return v, fmt.Errorf("eval %s: %w", expr, err)
	}
	return v, nil
}

func (t *tab) waitJS(expr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(t.ctx, d+time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		return fmt.Errorf("waiting for %s: %w", expr, err)
	}
	return nil
}

// key is one key press as a keyboard makes it: a key-down carrying the text, then the key-up.
type key struct {
	text, key, code string
	vk, modifiers   int64
}

func charKey(r rune) key {
	switch r {
	case '\r':
		return key{text: "\r", key: "Enter", code: "Enter", vk: 13}
	case 0x15: // Ctrl-U
		return key{key: "u", code: "KeyU", vk: 85, modifiers: 2}
	case 0x03: // Ctrl-C
		return key{key: "c", code: "KeyC", vk: 67, modifiers: 2}
	}
	return key{text: string(r), key: string(r)}
}

// press sends keys as real CDP key events (Input.dispatchKeyEvent).
func (t *tab) press(keys ...key) error {
	ctx, cancel := context.WithTimeout(t.ctx, 20*time.Second)
	defer cancel()
	return chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, k := range keys {
			down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Text: k.text, Key: k.key, Code: k.code, WindowsVirtualKeyCode: k.vk, Modifiers: k.modifiers}
			if k.text == "" {
				down.Type = input.DispatchKeyEventTypeRawKeyDown
			}
			up := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyUp, Key: k.key, Code: k.code, WindowsVirtualKeyCode: k.vk, Modifiers: k.modifiers}
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, down); err != nil {
				return fmt.Errorf("key down %q: %w", k.key, err)
			}
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, up); err != nil {
				return fmt.Errorf("key up %q: %w", k.key, err)
			}
		}
		return nil
	}))
}

func (t *tab) typeText(s string) error {
	keys := make([]key, 0, len(s))
	for _, r := range s {
		keys = append(keys, charKey(r))
	}
	return t.press(keys...)
}

// keyResult is what the probe's arm resolves with.
type keyResult struct {
	KeyMS      float64   `json:"key_ms"`
	DeliveryMS float64   `json:"delivery_ms"`
	Start      float64   `json:"start"`
	End        float64   `json:"end"`
	Frames     int       `json:"frames"`
	Renders    int       `json:"renders"`
	Gaps       []float64 `json:"gaps"`
}

// timed arms the probe for a row reading row, presses k and returns the probe's figures.
func (t *tab) timed(row string, bulk bool, k key, d time.Duration) (keyResult, error) {
	if _, err := evalT[string](t, fmt.Sprintf("window.__pb.arm(%q, %v)", row, bulk), 10*time.Second); err != nil {
		return keyResult{}, err
	}
	if err := t.press(k); err != nil {
		return keyResult{}, err
	}
	return evalT[keyResult](t, "window.__pb.result", d)
}

// typeTimed types n letters one by one at the prompt, each timed from its key-down to the
// frame that shows it, pausing before each; every 40 letters the line is cleared (Ctrl-U).
func (t *tab) typeTimed(ctx context.Context, n int, pause time.Duration) (ms, delivery []float64, err error) {
	line := ""
	for i := 0; i < n; i++ {
		if len(line) == 40 {
			if err := t.press(charKey(0x15)); err != nil {
				return nil, nil, err
			}
			if err := t.waitJS("window.__pb.hasRow('$ ')", 10*time.Second); err != nil {
				return nil, nil, err
			}
			line = ""
		}
		if pause > 0 {
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		c := rune('a' + (i*7)%26)
		line += string(c)
		r, err := t.timed("$ "+line, false, charKey(c), 10*time.Second)
		if err != nil {
			return nil, nil, fmt.Errorf("key %d: %w", i, err)
		}
		ms = append(ms, r.KeyMS)
		delivery = append(delivery, r.DeliveryMS)
	}
	if err := t.press(charKey(0x15)); err != nil {
		return nil, nil, err
	}
	return ms, delivery, t.waitJS("window.__pb.hasRow('$ ')", 10*time.Second)
}

// heapMiB forces a GC in the page and returns its used JavaScript heap and the backing
// storage of its array buffers and external strings.
func (t *tab) heapMiB() (used, backing float64, err error) {
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	err = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, heapprofiler.CollectGarbage, cdp.Empty{}); err != nil {
			return fmt.Errorf("collect garbage: %w", err)
		}
		r, err := cdp.Call(ctx, tg, cdpruntime.GetHeapUsage, cdp.Empty{})
		if err != nil {
			return fmt.Errorf("heap usage: %w", err)
		}
		used, backing = r.UsedSize, r.BackingStorageSize
		return nil
	}))
	return used / (1 << 20), backing / (1 << 20), err
}
