package e2e

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func shellTool(env responses.FunctionShellToolEnvironmentUnionParam) responses.ToolUnionParam {
	return responses.ToolUnionParam{OfShell: &responses.FunctionShellToolParam{Environment: env}}
}

// The Responses API through the official openai-go client: conch's shell
// in a sandbox it makes, in a container the client names, or on the
// client's side; function tools; streaming; stored responses and
// previous_response_id; and what bad input gets.
func TestResponses(t *testing.T) {
	d := startDev(t)
	c := client(d)
	ctx := t.Context()

	t.Run("shell in a sandbox conch makes", func(t *testing.T) {
		resp, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "default",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run: echo from-responses")},
			Tools: []responses.ToolUnionParam{shellTool(responses.FunctionShellToolEnvironmentUnionParam{OfContainerAuto: &responses.ContainerAutoParam{}})},
		})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, it := range resp.Output {
			types = append(types, it.Type)
		}
		if got := strings.Join(types, ","); got != "shell_call,shell_call_output,message" {
			t.Fatalf("output items %s", got)
		}
		call, out := resp.Output[0].AsShellCall(), resp.Output[1].AsShellCallOutput()
		if call.Action.Commands[0] != "echo from-responses" || call.Action.TimeoutMs != 60000 || call.Environment.Type != "container_reference" || call.Environment.ContainerID == "" {
			t.Fatalf("shell_call %+v", call)
		}
		if out.CallID != call.CallID || out.Output[0].Stdout != "from-responses\n" || out.Output[0].Outcome.Type != "exit" || out.Output[0].Outcome.ExitCode != 0 {
			t.Fatalf("shell_call_output %+v", out)
		}
		if resp.Status != "completed" || !strings.Contains(resp.OutputText(), "from-responses") || resp.Usage.TotalTokens == 0 {
			t.Fatalf("response %s %q %+v", resp.Status, resp.OutputText(), resp.Usage)
		}
		var use struct {
			ServerToolUse struct {
				ShellCommands int `json:"shell_commands"`
			} `json:"server_tool_use"`
		}
		if err := json.Unmarshal([]byte(resp.Usage.RawJSON()), &use); err != nil || use.ServerToolUse.ShellCommands != 1 {
			t.Fatalf("usage %s", resp.Usage.RawJSON())
		}
		// Stored by default, read back whole.
		got, err := c.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{})
		if err != nil || got.ID != resp.ID || len(got.Output) != 3 || got.Output[1].ID != resp.Output[1].ID {
			t.Fatalf("get = %+v, %v", got, err)
		}
	})

	t.Run("streaming announces the items the response holds", func(t *testing.T) {
		stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: "default",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run: echo streamed")},
			Tools: []responses.ToolUnionParam{shellTool(responses.FunctionShellToolEnvironmentUnionParam{})},
		})
		var done []string
		var text strings.Builder
		var final responses.Response
		seq := int64(-1)
		for stream.Next() {
			ev := stream.Current()
			if ev.SequenceNumber != seq+1 {
				t.Fatalf("sequence_number %d after %d", ev.SequenceNumber, seq)
			}
			seq = ev.SequenceNumber
			switch ev.Type {
			case "response.output_item.done":
				done = append(done, ev.Item.ID)
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, it := range final.Output {
			ids = append(ids, it.ID)
		}
		if strings.Join(done, ",") != strings.Join(ids, ",") || len(ids) != 3 {
			t.Fatalf("streamed items %v, response items %v", done, ids)
		}
		if text.String() != final.OutputText() || !strings.Contains(text.String(), "streamed") {
			t.Fatalf("streamed text %q, response text %q", text.String(), final.OutputText())
		}
		if out := final.Output[1].AsShellCallOutput(); out.Output[0].Stdout != "streamed\n" {
			t.Fatalf("shell output %+v", out)
		}
	})

	t.Run("a command waiting for a human is an event of the stream", func(t *testing.T) {
		createGateway(t, d, map[string]any{"name": "asks", "upstream": map[string]any{"provider": "scripted"},
			"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
		answered := allowWhenPending(t, d, "uname -s", func(pendingApproval) {})
		stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: "asks", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run: uname -s")},
			Tools: []responses.ToolUnionParam{shellTool(responses.FunctionShellToolEnvironmentUnionParam{})},
		})
		var pending, callItem string
		var final responses.Response
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "conch.approval_pending":
				var a struct {
					ItemID   string `json:"item_id"`
					Approval struct{ Command string }
				}
				_ = json.Unmarshal([]byte(ev.RawJSON()), &a)
				pending, callItem = a.Approval.Command, a.ItemID
			case "response.completed":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if code := <-answered; code != http.StatusOK {
			t.Fatalf("resolve = %d", code)
		}
		if pending != "uname -s" || callItem != final.Output[0].ID {
			t.Fatalf("approval event for %q on item %q; items %+v", pending, callItem, final.Output)
		}
		if out := final.Output[1].AsShellCallOutput(); out.Output[0].Stdout != "Linux\n" {
			t.Fatalf("the approved command's output %+v", out)
		}
	})

	t.Run("a container the client names keeps its files across responses", func(t *testing.T) {
		ctr, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "for-responses"})
		if err != nil {
			t.Fatal(err)
		}
		id := ctr.ID
		ref := shellTool(responses.FunctionShellToolEnvironmentUnionParam{OfContainerReference: &responses.ContainerReferenceParam{ContainerID: id}})
		for _, cmd := range []string{"echo kept > /home/workspace/note", "cat /home/workspace/note"} {
			resp, err := c.Responses.New(ctx, responses.ResponseNewParams{
				Model: "default", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run: " + cmd)}, Tools: []responses.ToolUnionParam{ref},
			})
			if err != nil {
				t.Fatal(err)
			}
			if env := resp.Output[0].AsShellCall().Environment; env.ContainerID != id {
				t.Fatalf("ran in %+v, want container %s", env, id)
			}
			if cmd[0] == 'c' && resp.Output[1].AsShellCallOutput().Output[0].Stdout != "kept\n" {
				t.Fatalf("the container lost its file: %+v", resp.Output[1])
			}
		}
		// What the shell wrote is a file of the container.
		files, err := c.Containers.Files.List(ctx, id, openai.ContainerFileListParams{})
		if err != nil || len(files.Data) != 1 || !strings.HasSuffix(files.Data[0].Path, "/note") {
			t.Fatalf("container files %+v, %v", files, err)
		}
		// Another account's container is not found.
		key := newAccount(t, d, "responses-other")
		other := client(d, option.WithAPIKey(key))
		if code, body := d.call("POST", "/api/v1/gateways", key, map[string]any{"name": "default", "upstream": map[string]any{"provider": "scripted"}}); code != http.StatusOK && code != http.StatusConflict {
			t.Fatalf("gateway of the other account: %d %s", code, body)
		}
		_, err = other.Responses.New(ctx, responses.ResponseNewParams{
			Model: "default", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run: ls")}, Tools: []responses.ToolUnionParam{ref},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Param != "tools[0].environment.container_id" {
			t.Fatalf("another account's container: %v", err)
		}
	})

	// An upstream that calls the client's tools: a function, then the
	// shell it runs itself.
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		switch last := lastToolResult(req); {
		case strings.Contains(last, "sunny"):
			return 200, openAIToolCall("call_sh", "shell", map[string]string{"command": "uname"})
		case strings.Contains(last, "Linux"):
			return 200, openAIText("It is sunny, on Linux.")
		default:
			return 200, openAIToolCall("call_w", "get_weather", map[string]string{"city": "Lisbon"})
		}
	})
	createGateway(t, d, map[string]any{"name": "up", "upstream": map[string]any{"provider": "openai", "base_url": up.URL + "/v1", "model": "m"}})

	t.Run("function and local shell calls round trip with previous_response_id", func(t *testing.T) {
		weather := responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false)
		local := shellTool(responses.FunctionShellToolEnvironmentUnionParam{OfLocal: &responses.LocalEnvironmentParam{}})
		tools := []responses.ToolUnionParam{weather, local}
		first, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "up", Instructions: openai.String("be brief"), Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")},
		})
		if err != nil {
			t.Fatal(err)
		}
		fc := first.Output[len(first.Output)-1].AsFunctionCall()
		if fc.Type != "function_call" || fc.Name != "get_weather" || fc.CallID != "call_w" {
			t.Fatalf("first output %+v", first.Output)
		}
		result := responses.ResponseInputItemParamOfFunctionCallOutput("sunny")
		result.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
		second, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "up", PreviousResponseID: openai.String(first.ID), Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{result}},
		})
		if err != nil {
			t.Fatal(err)
		}
		sh := second.Output[len(second.Output)-1].AsShellCall()
		if sh.Type != "shell_call" || sh.Environment.Type != "local" || sh.Action.Commands[0] != "uname" {
			t.Fatalf("second output %+v", second.Output)
		}
		out := responses.ResponseInputItemParamOfShellCallOutput(sh.CallID, []responses.ResponseFunctionShellCallOutputContentParam{{
			Stdout: "Linux\n", Outcome: responses.ResponseFunctionShellCallOutputContentOutcomeUnionParam{OfExit: &responses.ResponseFunctionShellCallOutputContentOutcomeExitParam{ExitCode: 0}},
		}})
		third, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "up", PreviousResponseID: openai.String(second.ID), Tools: tools,
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if third.OutputText() != "It is sunny, on Linux." {
			t.Fatalf("third = %q", third.OutputText())
		}
		// The upstream saw the whole conversation, instructions only
		// where they were given.
		msgs := up.request(up.calls() - 1)["messages"].([]any)
		var roles []string
		for _, m := range msgs {
			roles = append(roles, m.(map[string]any)["role"].(string))
		}
		if got := strings.Join(roles, ","); got != "user,assistant,tool,assistant,tool" {
			t.Fatalf("upstream saw %s", got)
		}
		if !strings.Contains(toJSON(msgs[4]), `Linux\\n`) {
			t.Fatalf("the local shell's output did not reach the model: %s", toJSON(msgs[4]))
		}
		items, err := c.Responses.InputItems.List(ctx, third.ID, responses.InputItemListParams{})
		if err != nil || len(items.Data) != 1 || items.Data[0].Type != "shell_call_output" {
			t.Fatalf("input items %+v, %v", items, err)
		}
	})

	t.Run("store false keeps nothing", func(t *testing.T) {
		resp, err := c.Responses.New(ctx, responses.ResponseNewParams{
			Model: "default", Store: openai.Bool(false), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
		})
		if err != nil || !strings.Contains(resp.RawJSON(), `"store":false`) {
			t.Fatalf("%+v %v", resp, err)
		}
		var apiErr *openai.Error
		if _, err := c.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("get of an unstored response: %v", err)
		}
	})

	t.Run("delete, and other accounts see nothing", func(t *testing.T) {
		resp, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "default", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}})
		if err != nil {
			t.Fatal(err)
		}
		other := client(d, option.WithAPIKey(newAccount(t, d, "responses-reader")))
		var apiErr *openai.Error
		if _, err := other.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("another account read it: %v", err)
		}
		if err := other.Responses.Delete(ctx, resp.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("another account deleted it: %v", err)
		}
		if err := c.Responses.Delete(ctx, resp.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("get after delete: %v", err)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			body       string
			status     int
			param, msg string
		}{
			{`{"model": "default", "input": "x", "temperature": "hot"}`, 400, "temperature", "must be a number"},
			{`{"model": "default", "input": [{"type": "telepathy"}]}`, 400, "input[0].type", "telepathy"},
			{`{"model": "default", "input": [{"type": "function_call_output", "call_id": "call_nobody", "output": "x"}]}`, 400, "input", "call_nobody"},
			{`{"model": "default", "input": "x", "previous_response_id": "resp_unknown"}`, 404, "previous_response_id", "not found"},
			{`{"model": "default", "input": "x", "tools": [{"type": "shell", "environment": {"type": "moon"}}]}`, 400, "tools[0].environment.type", "container_auto"},
			{`{"model": "default", "input": "x", "tools": [{"type": "web_search"}]}`, 400, "tools[0].type", "web_search"},
			{`{"model": "nope", "input": "x"}`, 404, "", "does not exist"},
		} {
			code, body := d.call("POST", "/v1/responses", d.Key, json.RawMessage(tc.body))
			var e struct {
				Error struct {
					Message string
					Param   *string
				}
			}
			_ = json.Unmarshal(body, &e)
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if code != tc.status || param != tc.param || !strings.Contains(e.Error.Message, tc.msg) {
				t.Errorf("%s = %d %s, want %d with param %q", tc.body, code, body, tc.status, tc.param)
			}
		}
	})
}
