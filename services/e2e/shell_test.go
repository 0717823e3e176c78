package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestShellLoop drives the shell tool through conch dev with a fake upstream
// that scripts the model's calls.
func TestShellLoop(t *testing.T) {
	d := startDev(t)
	gateway := func(name string, commands []string, shell map[string]any) *fakeUpstream {
		up := shellScript(t, commands...)
		createGateway(t, d, map[string]any{"name": name, "shell": shell,
			"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
		return up
	}

	t.Run("files and cwd persist within a completion", func(t *testing.T) {
		gateway("loop", []string{"cd /tmp && echo hello > f.txt && mkdir -p d", "pwd; cat f.txt; ls", "echo err >&2; exit 3"}, map[string]any{"enabled": true})
		res, resp := completeShell(t, d, "loop", nil)
		if len(res) != 3 || res[1].Stdout != "/tmp\nhello\nd\nf.txt\n" || res[2].Stderr != "err\n" || *res[2].Outcome.ExitCode != 3 {
			t.Fatalf("results = %+v", res)
		}
		if !strings.Contains(resp.RawJSON(), `"shell_commands":3`) || resp.Choices[0].Message.Content != "done" {
			t.Errorf("response = %s", resp.RawJSON())
		}
	})

	t.Run("a new completion gets a new sandbox", func(t *testing.T) {
		gateway("fresh", []string{"ls /tmp/f.txt; pwd"}, map[string]any{"enabled": true})
		res, _ := completeShell(t, d, "fresh", nil)
		if len(res) != 1 || res[0].Stdout != "/home/workspace\n" || !strings.Contains(res[0].Stderr, "No such file") {
			t.Fatalf("results = %+v", res)
		}
	})

	t.Run("max_uses", func(t *testing.T) {
		gateway("limited", []string{"echo 1", "echo 2", "echo 3"}, map[string]any{"enabled": true})
		res, resp := completeShell(t, d, "limited", map[string]any{"tools": []any{map[string]any{"type": "shell", "max_uses": 2}}})
		if len(res) != 3 || res[1].Stdout != "2\n" || res[2].Outcome.Type != "error" || !strings.Contains(res[2].Error, "max_uses") {
			t.Fatalf("results = %+v", res)
		}
		if !strings.Contains(resp.RawJSON(), `"shell_commands":3`) {
			t.Errorf("blocked calls must count: %s", resp.RawJSON())
		}
	})

	t.Run("timeout and truncation", func(t *testing.T) {
		gateway("limits", []string{"echo before; sleep 30; echo after", "seq 1000", "printf 'ab'; printf '%0100d' 0 >&2"}, map[string]any{"enabled": true})
		res, _ := completeShell(t, d, "limits", map[string]any{"tools": []any{map[string]any{"type": "shell", "timeout_seconds": 1, "max_output_length": 20}}})
		if len(res) != 3 {
			t.Fatalf("results = %+v", res)
		}
		if res[0].Outcome.Type != "timeout" || res[0].Outcome.ExitCode != nil || res[0].Stdout != "before\n" {
			t.Errorf("timeout result = %+v", res[0])
		}
		if res[1].Stdout != "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n[output truncated]" {
			t.Errorf("stdout cut = %q", res[1].Stdout)
		}
		if res[2].Stdout != "ab" || res[2].Stderr != strings.Repeat("0", 18)+"\n[output truncated]" {
			t.Errorf("stderr gets what stdout left: %+v", res[2])
		}
	})

	t.Run("streaming shows the tool calls and ends with usage", func(t *testing.T) {
		gateway("streamed", []string{"echo streamed"}, map[string]any{"enabled": true})
		c := client(d)
		stream := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model: "streamed", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
		})
		var acc openai.ChatCompletionAccumulator
		var sawCall, sawResult, outputFirst bool
		conchChunks := 0
		for stream.Next() {
			ch := stream.Current()
			acc.AddChunk(ch)
			raw := ch.RawJSON()
			if _, ok := ch.JSON.ExtraFields["conch"]; ok {
				// conch rides only on the last chunk, with finish_reason.
				conchChunks++
				if len(ch.Choices) != 1 || ch.Choices[0].FinishReason == "" || !strings.Contains(raw, `"server_tool_calls":[{`) {
					t.Errorf("conch on a chunk that is not the last: %s", raw)
				}
			}
			sawCall = sawCall || strings.Contains(raw, `"event":"tool_call"`)
			// The output as it ran comes before the result.
			outputFirst = outputFirst || !sawResult && strings.Contains(raw, `"event":"tool_output"`) && strings.Contains(raw, `"stream":"stdout"`) && strings.Contains(raw, `"output":"streamed\n"`)
			sawResult = sawResult || strings.Contains(raw, `"event":"tool_result"`) && strings.Contains(raw, `streamed\\n`)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if conchChunks != 1 || !sawCall || !sawResult || !outputFirst || acc.Choices[0].Message.Content != "done" || acc.Choices[0].FinishReason != "stop" {
			t.Errorf("stream: %d chunks with conch, call %v output first %v result %v content %q", conchChunks, sawCall, outputFirst, sawResult, acc.Choices[0].Message.Content)
		}
	})

	t.Run("a session keeps its sandbox, cwd and files", func(t *testing.T) {
		up := turnScript(t, "cd /tmp && echo kept > s.txt", "pwd; cat s.txt", "pwd; ls /tmp")
		createGateway(t, d, map[string]any{"name": "sess", "shell": map[string]any{"enabled": true},
			"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
		session := option.WithHeader("X-Conch-Session-Id", "conv-1")
		completeShell(t, d, "sess", nil, session)
		res, _ := completeShell(t, d, "sess", nil, session)
		if len(res) != 1 || res[0].Stdout != "/tmp\nkept\n" {
			t.Errorf("second turn of the session = %+v", res)
		}
		res, _ = completeShell(t, d, "sess", nil)
		if len(res) != 1 || res[0].Stdout != "/home/workspace\n" {
			t.Errorf("a completion without the session = %+v", res)
		}
	})

	t.Run("a user's workspace persists across completions", func(t *testing.T) {
		up := turnScript(t, "echo persisted > notes.txt", "cat notes.txt", "cat notes.txt", "cat notes.txt")
		createGateway(t, d, map[string]any{"name": "persist", "shell": map[string]any{"enabled": true, "allow_data_persistence": true},
			"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
		steps := []struct {
			user, stdout, stderr string
		}{
			{"alice", "", ""},
			{"alice", "persisted\n", ""},
			{"bob", "", "No such file"},
			{"", "", "No such file"},
		}
		for i, st := range steps {
			body := map[string]any{}
			if st.user != "" {
				body["user"] = st.user
			}
			res, _ := completeShell(t, d, "persist", body)
			if len(res) != 1 || res[0].Stdout != st.stdout || !strings.Contains(res[0].Stderr, st.stderr) {
				t.Errorf("step %d (user %q) = %+v", i, st.user, res)
			}
		}
		// The file API sees what the shell wrote.
		code, body := d.call("GET", "/api/v1/shell/io/download?path=/notes.txt", d.Key, nil, "X-Shell-User-Id", "alice")
		if code != 200 || string(body) != "persisted\n" {
			t.Errorf("download = %d %q", code, body)
		}
	})

	t.Run("the scripted model runs a real command", func(t *testing.T) {
		c := client(d)
		resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: "default", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("please run `echo conch-$((6*7))`")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; !strings.Contains(got, "conch-42") || !strings.Contains(got, "exited with code 0") {
			t.Errorf("answer = %q", got)
		}
	})
}

// TestLoopLimit checks that a model that never stops calling tools is cut
// off at the gateway's iteration limit with a clear final message.
func TestLoopLimit(t *testing.T) {
	d := startDev(t)
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		return 200, openAIToolCall(fmt.Sprintf("call_%d", n), "shell", map[string]string{"command": "true"})
	})
	createGateway(t, d, map[string]any{"name": "looping", "max_iterations": 3, "shell": map[string]any{"enabled": true},
		"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
	res, resp := completeShell(t, d, "looping", nil)
	if len(res) != 3 || up.calls() != 3 {
		t.Fatalf("ran %d commands over %d model calls, want 3 and 3", len(res), up.calls())
	}
	if ch := resp.Choices[0]; ch.FinishReason != "length" || !strings.Contains(ch.Message.Content, "loop limit") {
		t.Errorf("final choice = %+v", ch)
	}
}
