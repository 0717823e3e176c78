package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/image/imagetest"
)

// A template made from an image archive through the CLI starts sandboxes
// with the image's root, its settings and a writable workdir.
func TestTemplates(t *testing.T) {
	d := startDev(t)
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	conch := func(args ...string) string {
		t.Helper()
		out, errOut, code := runConch(t, env, args...)
		if code != 0 {
			t.Fatalf("conch %q: %q %q %d", args, out, errOut, code)
		}
		return out
	}
	archive := imagetest.Save(t, imagetest.Minimal(t, imagetest.Options{
		Files:   []imagetest.File{{Path: "opt", Dir: true}, {Path: "opt/marker", Body: "from the image\n"}, {Path: "app", Dir: true}},
		Env:     []string{"GREETING=hi"},
		Workdir: "/app",
	}))
	conch("templates", "create", "mini", "--start", "echo up > /tmp/up", "--ready", "test -f /tmp/up", "--env", "MODE=e2e")
	if out := conch("templates", "push", "mini", archive); !strings.Contains(out, "status:   ready") || !strings.Contains(out, "digest:") {
		t.Fatalf("push printed:\n%s", out)
	}
	if out := conch("templates", "list"); !strings.Contains(out, "mini") || !strings.Contains(out, "ready") {
		t.Errorf("templates list:\n%s", out)
	}
	id := strings.TrimSpace(conch("sandbox", "create", "--template", "mini"))
	if got := conch("sandbox", "exec", id, "pwd; cat /opt/marker /tmp/up; echo $GREETING $MODE; echo new > file && cat file"); got != "/app\nfrom the image\nup\nhi e2e\nnew\n" {
		t.Errorf("the template's sandbox says %q", got)
	}
	status, body := d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil)
	if status != 200 || !strings.Contains(string(body), `"template":"mini"`) {
		t.Errorf("GET sandbox = %d %s, want its template", status, body)
	}
	status, body = d.call("GET", "/api/v1/templates/mini", d.Key, nil)
	var tpl struct {
		Status, Digest, Workdir string
		SizeBytes               int64 `json:"size_bytes"`
	}
	if err := json.Unmarshal(body, &tpl); status != 200 || err != nil || tpl.Status != "ready" || !strings.HasPrefix(tpl.Digest, "sha256:") || tpl.Workdir != "/app" || tpl.SizeBytes <= 0 {
		t.Errorf("GET template = %d %s", status, body)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		want         string
	}{
		{"POST", "/api/v1/templates", map[string]any{"name": "Bad Name"}, 400, "name:"},
		{"POST", "/api/v1/templates", map[string]any{"name": "mini"}, 409, "exists"},
		{"POST", "/api/v1/templates", map[string]any{"name": "pulled", "image": "registry.example.com/app:1"}, 400, "not one the operator allows"},
		{"POST", "/api/v1/templates", map[string]any{"name": "evil", "env": map[string]string{"LD_PRELOAD": "/x.so"}}, 400, "LD_PRELOAD"},
		{"GET", "/api/v1/templates/nope", nil, 404, "not found"},
		{"POST", "/api/v1/sandboxes", map[string]any{"template": "nope"}, 404, "not found"},
		{"DELETE", "/api/v1/templates/nope", nil, 404, "not found"},
	} {
		status, body := d.call(tc.method, tc.path, d.Key, tc.body)
		if status != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s = %d %s, want %d with %q", tc.method, tc.path, status, body, tc.status, tc.want)
		}
	}
	// A refused archive is a 400 in the API's envelope, and the
	// template keeps why.
	status, _, raw := d.rawCall("PUT", "/api/v1/templates/mini/image", d.Key, "not an image")
	if status != 400 || !strings.Contains(string(raw), `"error"`) {
		t.Errorf("PUT garbage = %d %s", status, raw)
	}
	conch("templates", "rm", "mini")
	if status, _ := d.call("GET", "/api/v1/templates/mini", d.Key, nil); status != 404 {
		t.Errorf("a deleted template answers %d", status)
	}
	// Its running sandbox keeps its root.
	if got := conch("sandbox", "exec", id, "cat /opt/marker"); got != "from the image\n" {
		t.Errorf("after the template's delete its sandbox reads %q", got)
	}
}
