package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// sseEvent is one server-sent event.
type sseEvent struct{ name, data string }

// A command with "stream": true answers its output as server-sent events
// while it runs: here the first line is read while the command still
// waits for a file that only a second command, sent after that read,
// makes. Then the rest, in order, and the exit.
func TestStreamedCommand(t *testing.T) {
	d := startDev(t)
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	cmd := `echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; printf 'caf\303'; sleep 0.2; printf '\251\n'; printf '\377' >&2; echo second; exit 3`
	req, err := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/api/v1/sandboxes/"+sb.ID+"/commands",
		strings.NewReader(`{"command": `+jsonString(cmd)+`, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("answer %d %s", resp.StatusCode, ct)
	}
	events := make(chan sseEvent)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				events <- ev
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	if first := <-events; first != (sseEvent{"stdout", `{"data":"first\n"}`}) {
		t.Fatalf("first event %+v", first)
	}
	// The command is still running: it waits for /tmp/go.
	if status, body := d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": "touch /tmp/go"}); status != 200 {
		t.Fatalf("second command = %d %s", status, body)
	}
	var rest []sseEvent
	for ev := range events {
		rest = append(rest, ev)
	}
	// A character cut between two writes arrives whole, as text; a byte
	// that is no text arrives as base64.
	var stdout, stderr strings.Builder
	for _, ev := range rest {
		var o struct{ Data, Encoding string }
		if ev.name != "stdout" && ev.name != "stderr" {
			continue
		}
		if err := json.Unmarshal([]byte(ev.data), &o); err != nil {
			t.Fatal(err)
		}
		w := &stdout
		if ev.name == "stderr" {
			w = &stderr
		}
		w.WriteString(o.Encoding + ":" + o.Data + "|")
	}
	if got := stdout.String(); got != ":caf|:é\n|:second\n|" && got != ":café\n|:second\n|" && got != ":café\nsecond\n|" && got != ":caf|:é\nsecond\n|" {
		t.Errorf("stdout events: %q", got)
	}
	if got := stderr.String(); got != "base64:/w==|" {
		t.Errorf("stderr events: %q", got)
	}
	last := rest[len(rest)-1]
	var exit struct {
		ExitCode *int `json:"exit_code"`
		TimedOut bool `json:"timed_out"`
	}
	if err := json.Unmarshal([]byte(last.data), &exit); last.name != "exit" || err != nil || exit.ExitCode == nil || *exit.ExitCode != 3 || exit.TimedOut {
		t.Errorf("last event %+v", last)
	}

	// Errors before the first event are the API's: a 404 envelope.
	status, body = d.call("POST", "/api/v1/sandboxes/sb-nope/commands", d.Key, map[string]any{"command": "true", "stream": true})
	if status != 404 || !strings.Contains(string(body), `"error"`) {
		t.Errorf("a stream to no sandbox = %d %s", status, body)
	}

	// The CLI prints as it comes and exits with the command's code.
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	out, errOut, code := runConch(t, env, "sandbox", "exec", sb.ID, "echo out; echo err >&2; exit 7")
	if out != "out\n" || errOut != "err\n" || code != 7 {
		t.Errorf("conch sandbox exec: %q %q %d", out, errOut, code)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The same stream read by curl: each chunk of output an event as it
// comes, the exit last.
func TestStreamedCommandCurl(t *testing.T) {
	d := startDev(t)
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	out, err := exec.CommandContext(t.Context(), "curl", "-sSN", "-X", "POST",
		"-H", "Authorization: Bearer "+d.Key, "-H", "Content-Type: application/json",
		"-d", `{"command": "echo one; sleep 0.2; echo two >&2; exit 4", "stream": true}`,
		d.URL+"/api/v1/sandboxes/"+sb.ID+"/commands").Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	want := []string{
		"event: stdout\ndata: {\"data\":\"one\\n\"}\n\n",
		"event: stderr\ndata: {\"data\":\"two\\n\"}\n\n",
		"event: exit\ndata: {",
		`"exit_code":4`,
	}
	rest := string(out)
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("curl read %q; no %q after what came before", out, w)
		}
		rest = rest[i+len(w):]
	}
}
