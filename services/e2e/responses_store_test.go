package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestStoredResponseReadBack: what the Responses API accepts for storing
// can be read back. A 20 MiB input that compresses to almost nothing is
// within every limit on the way in, so GET and previous_response_id must
// find it whole.
func TestStoredResponseReadBack(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	input := strings.Repeat("a", 20<<20)
	code, body := d.call("POST", "/v1/responses", d.Key, map[string]any{"model": "default", "input": input})
	if code != http.StatusOK {
		t.Fatalf("POST /v1/responses: %d %.300s", code, body)
	}
	var r struct {
		ID    string
		Store bool
	}
	if err := json.Unmarshal(body, &r); err != nil || !r.Store {
		t.Fatalf("response %.300s: %v", body, err)
	}
	if code, body := d.call("GET", "/v1/responses/"+r.ID, d.Key, nil); code != http.StatusOK || !strings.Contains(string(body), r.ID) {
		t.Fatalf("GET the stored response: %d %.300s", code, body)
	}
	code, body = d.call("GET", "/v1/responses/"+r.ID+"/input_items?limit=1", d.Key, nil)
	var items struct {
		Data []struct {
			Content []struct{ Text string }
		}
	}
	if code != http.StatusOK || json.Unmarshal(body, &items) != nil || len(items.Data) != 1 || len(items.Data[0].Content) != 1 || items.Data[0].Content[0].Text != input {
		t.Fatalf("GET its input items: %d %.300s", code, body)
	}
	code, body = d.call("POST", "/v1/responses", d.Key, map[string]any{"model": "default", "input": "and then?", "previous_response_id": r.ID})
	if code != http.StatusOK {
		t.Fatalf("continue it with previous_response_id: %d %.300s", code, body)
	}
}

// TestResponseNotStored: a response that ran but could not be stored, as
// store asked, is an error, not a silent "store": false. The account's
// quota of stored bytes is too small for any response: the model runs
// (the account has room for one more response), the store is refused,
// and the answer is the quota's 429 saying the response was not stored,
// with the response the work made and no invitation to retry; a stream
// ends with OpenAI's error event and response.failed. Neither is found
// afterwards.
func TestResponseNotStored(t *testing.T) {
	t.Parallel()
	d := startDev(t)
	key := newAccount(t, d, "tight")
	code, body := d.call("GET", "/api/v1/quotas", key, nil)
	var me struct {
		AccountID string `json:"account_id"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &me) != nil {
		t.Fatalf("GET /api/v1/quotas: %d %s", code, body)
	}
	if code, body := d.call("PUT", "/api/v1/accounts/"+me.AccountID+"/quotas", d.Key, map[string]any{"quotas": map[string]int64{"stored_response_bytes": 10}}); code != http.StatusOK {
		t.Fatalf("set quotas: %d %s", code, body)
	}
	gw := map[string]any{"name": "default", "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"enabled": true}}
	if code, body := d.call("POST", "/api/v1/gateways", key, gw); code != http.StatusOK {
		t.Fatalf("gateway: %d %s", code, body)
	}
	notFound := func(t *testing.T, id string) {
		t.Helper()
		if code, body := d.call("GET", "/v1/responses/"+id, key, nil); code != http.StatusNotFound {
			t.Fatalf("GET a response not stored: %d %.300s", code, body)
		}
	}

	t.Run("non-streamed", func(t *testing.T) {
		code, hdr, body := d.do("POST", "/v1/responses", key, map[string]any{"model": "default", "input": "run: echo not-lost"})
		var answer struct {
			Error struct{ Code, Param, Message, Type string }
			// The work ran: the response is in the answer.
			Response struct {
				ID, Status string
				Store      bool
				Error      struct{ Code string }
				Output     []struct {
					Type   string
					Output []struct{ Stdout string }
				}
			}
		}
		if err := json.Unmarshal(body, &answer); err != nil {
			t.Fatalf("%d %s: %v", code, body, err)
		}
		e, r := answer.Error, answer.Response
		if code != http.StatusTooManyRequests || e.Code != "response_not_stored" || e.Param != "store" ||
			!strings.Contains(e.Message, "was not stored: quota stored_response_bytes exceeded") || !strings.Contains(e.Message, r.ID) {
			t.Fatalf("%d %s", code, body)
		}
		if hdr.Get("X-Should-Retry") != "false" {
			t.Fatalf("X-Should-Retry %q: an SDK would run the response again", hdr.Get("X-Should-Retry"))
		}
		if r.Status != "failed" || r.Error.Code != "response_not_stored" || !r.Store || len(r.Output) < 2 || r.Output[1].Type != "shell_call_output" || r.Output[1].Output[0].Stdout != "not-lost\n" {
			t.Fatalf("the response in the answer: %s", body)
		}
		notFound(t, r.ID)
	})

	t.Run("streamed", func(t *testing.T) {
		c := client(d, option.WithAPIKey(key))
		stream := c.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
			Model: "default", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("run: echo streamed")},
		})
		var types []string
		var errEvent responses.ResponseStreamEventUnion
		var final responses.Response
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			switch ev.Type {
			case "error":
				errEvent = ev
			case "response.failed":
				final = ev.Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if n := len(types); n < 2 || types[n-2] != "error" || types[n-1] != "response.failed" {
			t.Fatalf("events %v, want error then response.failed last", types)
		}
		if errEvent.Code != "response_not_stored" || !strings.Contains(errEvent.Message, "quota stored_response_bytes exceeded") {
			t.Fatalf("error event %s", errEvent.RawJSON())
		}
		if final.Status != "failed" || final.Error.Code != "response_not_stored" || !strings.Contains(final.OutputText(), "streamed") {
			t.Fatalf("response.failed %s", final.RawJSON())
		}
		notFound(t, final.ID)
	})
}
