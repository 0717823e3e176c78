package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestDeleteDuringACommandKeepsTheWorkspace races DELETE of a persistent
// sandbox against a command writing in it, 100 rounds: the unmount used to
// race the command's flush, which then scanned the empty mount point and
// removed every stored file. No acknowledged file may ever be lost.
func TestDeleteDuringACommandKeepsTheWorkspace(t *testing.T) {
	d := startDev(t)
	const user = "racer"
	create := func() string { return persistentSandbox(t, d, user) }
	run := func(id, command string) (int, string) {
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command, "timeout_seconds": 30})
		return code, string(body)
	}
	id := create()
	if code, body := run(id, "for i in 0 1 2 3 4 5 6 7 8 9; do echo $i > seed$i; done"); code != http.StatusOK || !strings.Contains(body, `"exit_code":0`) {
		t.Fatalf("seed = %d %s", code, body)
	}
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete = %d %s", code, body)
	}
	for round := range 100 {
		id := create()
		var wg sync.WaitGroup
		wg.Go(func() { run(id, fmt.Sprintf("echo %d > round%d; sleep 30", round, round)) })
		if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
			t.Fatalf("round %d: delete = %d %s", round, code, body)
		}
		wg.Wait()
	}
	id = create()
	code, body := run(id, "cat seed0 seed1 seed2 seed3 seed4 seed5 seed6 seed7 seed8 seed9 | tr -d '\\n'")
	if code != http.StatusOK || !strings.Contains(body, `"stdout":"0123456789"`) {
		t.Fatalf("the seeded files after 100 raced deletes: %d %s", code, body)
	}
}

// TestHydrateKeepsModeAndMtime: a persistent workspace comes back with the
// permission bits and modification times its files had.
func TestHydrateKeepsModeAndMtime(t *testing.T) {
	d := startDev(t)
	const user = "keeper"
	session := func(command string) string {
		t.Helper()
		id := persistentSandbox(t, d, user)
		defer d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil)
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command})
		if code != http.StatusOK || !strings.Contains(string(body), `"exit_code":0`) {
			t.Fatalf("%q = %d %s", command, code, body)
		}
		return string(body)
	}
	session("umask 0 && echo x > shared && echo y > private && chmod 600 private && mkdir -m 770 team && touch -d 2020-01-02T03:04:05Z shared private")
	out := session("stat -c '%n %a %Y' shared private team | tr '\\n' ' '")
	for _, want := range []string{"shared 666 1577934245", "private 600 1577934245", "team 770"} {
		if !strings.Contains(out, want) {
			t.Errorf("after hydrate: %s, want %q", out, want)
		}
	}
}

// TestUnstorableNamesDoNotBlockTheRest: a file whose name the store
// cannot hold is reported on the command's stderr and left out; the other
// files are saved, and later commands run and save as usual.
func TestUnstorableNamesDoNotBlockTheRest(t *testing.T) {
	d := startDev(t)
	const user = "names"
	create := func() string { return persistentSandbox(t, d, user) }
	run := func(id, command string) string {
		t.Helper()
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command})
		if code != http.StatusOK {
			t.Fatalf("%q = %d %s", command, code, body)
		}
		return string(body)
	}
	unsaved := func(id string) []map[string]any {
		t.Helper()
		code, body := d.call("GET", "/api/v1/sandboxes/"+id, d.Key, nil)
		var got struct {
			Unsaved []map[string]any `json:"unsaved"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
			t.Fatalf("GET sandbox = %d %s", code, body)
		}
		return got.Unsaved
	}
	// 255 bytes is Linux's longest name; a sandbox cannot make a longer one.
	long := strings.Repeat("n", 255)
	id := create()
	out := run(id, `echo good > good && echo bad > "$(printf 'bad\377name')" && mkdir -p d && echo x > d/... && echo long > `+long)
	if !strings.Contains(out, "not saved: not valid UTF-8") || !strings.Contains(out, `"exit_code":0`) {
		t.Fatalf("the unsaveable name was not reported: %s", out)
	}
	if got := unsaved(id); len(got) != 1 || got[0]["path"] != `/home/workspace/bad\xffname` || got[0]["reason"] != "not valid UTF-8" {
		t.Fatalf("the status lists as unsaved %v, want only the invalid UTF-8 name", got)
	}
	if out := run(id, "echo later > later"); !strings.Contains(out, `"exit_code":0`) || strings.Contains(out, "not saved") {
		t.Fatalf("a later command: %s", out)
	}
	if got := unsaved(id); len(got) != 1 {
		t.Fatalf("the status forgot the unsaved name before it went: %v", got)
	}
	run(id, "rm bad*name")
	if got := unsaved(id); len(got) != 0 {
		t.Fatalf("the status still lists %v after the file was removed", got)
	}
	d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil)
	id = create()
	if out := run(id, "cat good later d/... "+long); !strings.Contains(out, `"stdout":"good\nlater\nx\nlong\n"`) {
		t.Fatalf("the storable files were not saved: %s", out)
	}
	d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil)
}
