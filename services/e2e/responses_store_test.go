package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
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
