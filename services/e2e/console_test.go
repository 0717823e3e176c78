package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/conch-sh/conch/services/internal/conchtest"
)

// The console at / in headless Chromium, driven with the keyboard alone:
// the key, the sandboxes with their labels, a live terminal in the page,
// the audit trail filtered, the gateways. Its screenshots are kept in the
// test's output directory ($CONCH_SCREENSHOTS, else a temp dir) and
// named in the log.
func TestConsole(t *testing.T) {
	d := startDev(t)
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"labels": map[string]string{"team": "infra"}})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	shots := os.Getenv("CONCH_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	ctx := conchtest.Browser(t)
	wait := func(expr string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
			st, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#status").textContent`))
			t.Fatalf("waiting for %s: %v (status %q)", expr, err, st)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(shots, "console-"+name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
	keys := func(k string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.KeyEvent(k)); err != nil {
			t.Fatal(err)
		}
	}
	// focus moves the keyboard's focus to the element by Tab alone (with
	// back, Shift-Tab).
	focusBy := func(selector string, back bool) {
		t.Helper()
		for range 60 {
			at, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.activeElement === document.querySelector(`+jsString(selector)+`)`))
			if err != nil {
				t.Fatal(err)
			}
			if at {
				return
			}
			var opts []chromedp.KeyOption
			if back {
				opts = append(opts, chromedp.KeyModifiers(chromedp.ModifierShift))
			}
			if _, err := chromedp.Run(ctx, chromedp.KeyEvent(kb.Tab, opts...)); err != nil {
				t.Fatal(err)
			}
		}
		t.Fatalf("Tab never reached %s", selector)
	}
	focus := func(selector string) { t.Helper(); focusBy(selector, false) }

	if _, err := chromedp.Run(ctx, chromedp.Navigate(d.URL+"/")); err != nil {
		t.Fatal(err)
	}
	wait(`document.querySelector("#status").textContent.includes("API key")`)
	focus("#key")
	keys(d.Key + kb.Enter)
	wait(`[...document.querySelectorAll("#sandbox-table tbody tr")].some(r => r.textContent.includes(` + jsString(sb.ID) + `) && r.textContent.includes("team=infra"))`)
	shot("sandboxes")

	// Its files, from the keyboard.
	if status, body := d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": "echo x > notes.txt"}); status != 200 {
		t.Fatalf("command = %d %s", status, body)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelectorAll("#sandbox-table tbody tr button")[1].id = "first-files"`)); err != nil {
		t.Fatal(err)
	}
	focus("#first-files")
	keys(kb.Enter)
	wait(`!document.querySelector("#files-pane").hidden && document.querySelector("#files-table tbody").textContent.includes("notes.txt")`)

	// The terminal, opened from the keyboard, typed into and read back.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#sandbox-table tbody tr button").id = "first-terminal"`)); err != nil {
		t.Fatal(err)
	}
	focus("#first-terminal")
	keys(kb.Enter)
	wait(`document.querySelector("#terminal .xterm-rows") !== null && document.activeElement.classList.contains("xterm-helper-textarea")`)
	// Typed as a keyboard's text input reaches a focused field (key
	// events carry text twice to xterm.js's textarea), then Enter.
	wait(`document.querySelector("#terminal .xterm-rows").textContent.includes("$")`)
	insert := func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: "echo con$((40+2))sole"})
		return chromedp.Void{}, err
	}
	if _, err := chromedp.Run(ctx, insert); err != nil {
		t.Fatal(err)
	}
	keys(kb.Enter)
	wait(`document.querySelector("#terminal .xterm-rows").textContent.includes("con42sole")`)
	shot("terminal")

	// The audit trail, by the nav's link and the filter's form.
	if status, body := d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": "echo audited-by-console"}); status != 200 {
		t.Fatalf("command = %d %s", status, body)
	}
	// Ctrl-] leaves the terminal for the page.
	if _, err := chromedp.Run(ctx, chromedp.KeyEvent("]", chromedp.KeyModifiers(chromedp.ModifierCtrl))); err != nil {
		t.Fatal(err)
	}
	wait(`document.activeElement === document.querySelector("#terminal-close")`)
	focusBy("#nav-audit", true)
	keys(kb.Enter)
	wait(`!document.querySelector("#audit").hidden`)
	// Records reach the trail within its flush interval.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, body := d.call("GET", "/api/v1/audit?q=audited-by&page_size=5", d.Key, nil)
		if strings.Contains(string(body), "audited-by-console") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit record in 30s: %s", body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	focus("#audit-q")
	keys("audited-by" + kb.Enter)
	wait(`[...document.querySelectorAll("#audit-table tbody tr")].length > 0 && [...document.querySelectorAll("#audit-table tbody tr")].every(r => r.textContent.includes("audited-by-console"))`)
	shot("audit")

	focus("#nav-gateways")
	keys(kb.Enter)
	wait(`!document.querySelector("#gateways").hidden && document.querySelector("#gateway-list").children.length > 0`)
	shot("gateways")

	// What the page shows is text: a label that looks like markup stays
	// text.
	d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"labels": map[string]string{"x": "<img src=x onerror=alert(1)>"}})
	focus("#nav-sandboxes")
	keys(kb.Enter)
	wait(`[...document.querySelectorAll("#sandbox-table tbody td")].some(td => td.textContent.includes("<img src=x"))`)
	imgs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#sandbox-table img").length`))
	if err != nil || imgs != 0 {
		t.Fatalf("a label became markup: %d images, %v", imgs, err)
	}
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return strings.ReplaceAll(string(b), "`", "\\u0060")
}
