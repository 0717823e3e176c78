package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesKeepTheirContainer: the container a response names outlives
// it, as OpenAI's does for its idle lifetime; a previous_response_id
// continuation runs in it (what the first command wrote is there), and a
// continuation for another user gets its own. A user named on a gateway
// without persistence is told so in the response.
func TestResponsesKeepTheirContainer(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	c := client(d)
	ctx := t.Context()
	run := func(t *testing.T, input, previous, user string) *responses.Response {
		t.Helper()
		p := responses.ResponseNewParams{Model: "default", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(input)},
			Tools: []responses.ToolUnionParam{shellTool(responses.FunctionShellToolEnvironmentUnionParam{OfContainerAuto: &responses.ContainerAutoParam{}})}}
		if previous != "" {
			p.PreviousResponseID = openai.String(previous)
		}
		if user != "" {
			p.User = openai.String(user)
		}
		resp, err := c.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	container := func(t *testing.T, r *responses.Response) string {
		t.Helper()
		if len(r.Output) < 2 || r.Output[0].Type != "shell_call" {
			t.Fatalf("output %s", r.RawJSON())
		}
		return r.Output[0].AsShellCall().Environment.ContainerID
	}
	stdout := func(r *responses.Response) string { return r.Output[1].AsShellCallOutput().Output[0].Stdout }

	first := run(t, "run: echo kept > /tmp/mark && echo written", "", "")
	id := container(t, first)
	if code, body := d.call("GET", "/v1/containers/"+id, d.Key, nil); code != http.StatusOK || !strings.Contains(string(body), `"status":"running"`) {
		t.Fatalf("the first response's container after it ended: %d %s", code, body)
	}
	next := run(t, "run: cat /tmp/mark", first.ID, "")
	if got := container(t, next); got != id || stdout(next) != "kept\n" {
		t.Fatalf("continuation ran in %s (want %s) and read %q", got, id, stdout(next))
	}
	other := run(t, "run: cat /tmp/mark || echo absent", next.ID, "someone-else")
	if got := container(t, other); got == id || !strings.Contains(stdout(other), "absent") {
		t.Fatalf("another user's continuation ran in %s (the conversation's is %s) and read %q", got, id, stdout(other))
	}
	// Once the container is gone, a continuation gets a new one.
	if code, body := d.call("DELETE", "/v1/containers/"+id, d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete the container: %d %s", code, body)
	}
	after := run(t, "run: cat /tmp/mark || echo fresh", next.ID, "")
	if got := container(t, after); got == id || !strings.Contains(stdout(after), "fresh") {
		t.Fatalf("continuation after its container went ran in %s and read %q", got, stdout(after))
	}

	// dev's default gateway keeps no user's data.
	var out struct {
		Conch struct {
			Workspace struct {
				User       string
				Persistent bool
				Reason     string
			}
		}
	}
	if err := json.Unmarshal([]byte(other.RawJSON()), &out); err != nil {
		t.Fatal(err)
	}
	if w := out.Conch.Workspace; w.User != "someone-else" || w.Persistent || !strings.Contains(w.Reason, "does not allow data persistence") {
		t.Fatalf("conch.workspace of a user on a gateway without persistence: %+v", w)
	}
}
