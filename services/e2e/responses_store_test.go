package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/pki"
	"github.com/conch-sh/conch/services/launch"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	clientv3 "go.etcd.io/etcd/client/v3"
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
		code, hdr, body := d.do("POST", "/v1/responses", key, map[string]any{"model": "default", "input": "run: echo not-lost", "tools": []any{map[string]any{"type": "shell"}}})
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

// TestEtcdSpace runs conch dev on an etcd of 16 MiB. Stored responses
// live in the object store: more of them than etcd could ever hold are
// stored, and etcd stays as it was. Then etcd is filled by hand (as an
// operator's mistake or a bug would) until it is short of space: storing a
// response is refused before the model runs, naming etcd's space; /readyz
// reports it in its body while staying 200, and the metrics show it; once
// the keys are deleted the router compacts and defragments etcd (and
// disarms NOSPACE), and responses are stored again, with no operator.
func TestEtcdSpace(t *testing.T) {
	t.Parallel()
	const quota = 16 << 20
	d := startDev(t, fmt.Sprintf("CONCH_ETCD_QUOTA_BYTES=%d", quota))
	type member struct {
		Name  string
		Size  int64 `json:"db_size"`
		Quota int64
	}
	var ready struct {
		Status string
		Etcd   struct {
			Members []member
			Alarms  []struct{ Type string }
			Writes  string
			Checked string `json:"checked_at"`
		}
	}
	readyz := func(t *testing.T) {
		t.Helper()
		code, body := d.call("GET", "/readyz", "", nil)
		if code != http.StatusOK || json.Unmarshal(body, &ready) != nil {
			t.Fatalf("/readyz: %d %s (an etcd short of space is reported, never unready)", code, body)
		}
	}
	waitReadyz := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for readyz(t); !cond(); readyz(t) {
			if time.Now().After(deadline) {
				t.Fatalf("after 90s, /readyz does not show %s: %+v", what, ready)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitReadyz(t, "etcd's space", func() bool { return ready.Etcd.Checked != "" })
	if ready.Status != "ready" || ready.Etcd.Writes != "all" || len(ready.Etcd.Members) != 1 || ready.Etcd.Members[0].Quota != quota {
		t.Fatalf("/readyz of a fresh cluster: %+v", ready)
	}
	sizeBefore := ready.Etcd.Members[0].Size

	// 24 responses of 768 KiB of random bytes: more than etcd holds.
	random := make([]byte, 768<<10)
	var stored []string
	for range 24 {
		_, _ = rand.Read(random)
		code, body := d.call("POST", "/v1/responses", d.Key, map[string]any{"model": "default", "input": base64.StdEncoding.EncodeToString(random)})
		if code != http.StatusOK {
			t.Fatalf("storing response %d: %d %.300s", len(stored), code, body)
		}
		var r struct{ ID string }
		_ = json.Unmarshal(body, &r)
		stored = append(stored, r.ID)
	}
	last := stored[len(stored)-1]
	if code, body := d.call("GET", "/v1/responses/"+stored[0], d.Key, nil); code != http.StatusOK {
		t.Fatalf("GET the first: %d %.300s", code, body)
	}
	waitReadyz(t, "a fresh read of etcd's size", func() bool { return ready.Etcd.Checked != "" })
	if grew := ready.Etcd.Members[0].Size - sizeBefore; grew > quota/4 {
		t.Fatalf("etcd grew by %d bytes for %d stored responses: they are not kept there", grew, len(stored))
	}

	// Fill etcd by hand, as root.
	cli := devEtcd(t, d)
	filled := 0
	for ; ; filled++ {
		if filled > 2*quota/len(random) {
			t.Fatalf("%d values of %d bytes put in an etcd of %d", filled, len(random), quota)
		}
		_, _ = rand.Read(random)
		if _, err := cli.Put(t.Context(), fmt.Sprintf("e2e/fill/%03d", filled), string(random)); err != nil {
			t.Logf("etcd refused the fill after %d values: %v", filled, err)
			break
		}
		if readyz(t); ready.Etcd.Writes != "all" {
			break
		}
	}
	// The elected router compacts and defragments at once: what the fill
	// left as history goes, and writes may open again. Top up until live
	// data alone keeps etcd past its mark, two of the watcher's reads in
	// a row.
	small := make([]byte, 256<<10)
	deadline := time.Now().Add(2 * time.Minute)
	for stable, last := 0, ""; stable < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("etcd is not kept short of space: %+v", ready)
		}
		readyz(t)
		if ready.Etcd.Writes == "all" {
			stable = 0
			_, _ = rand.Read(small)
			filled++
			_, _ = cli.Put(t.Context(), fmt.Sprintf("e2e/fill/%03d", filled), string(small))
			continue
		}
		if ready.Etcd.Checked != last {
			stable, last = stable+1, ready.Etcd.Checked
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ready.Status != "degraded" {
		t.Fatalf("/readyz with etcd short of space: %+v", ready)
	}
	code, body := d.call("POST", "/v1/responses", d.Key, map[string]any{"model": "default", "input": "run: echo never", "previous_response_id": last})
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "responses cannot be stored now (etcd is") {
		t.Fatalf("storing a response with etcd short of space: %d %.500s", code, body)
	}
	_, body = d.call("GET", "/metrics", "", nil)
	for _, m := range []string{`conch_etcd_db_size_bytes{member="conch"`, `conch_etcd_db_quota_bytes{member="conch"`, `conch_etcd_alarm{alarm="NOSPACE"`, `conch_etcd_space_maintainer{`} {
		if !strings.Contains(string(body), m) {
			t.Fatalf("no %s in /metrics", m)
		}
	}
	// What was stored is still read, and deletes go through, even under
	// NOSPACE.
	if code, body := d.call("GET", "/v1/responses/"+last, d.Key, nil); code != http.StatusOK {
		t.Fatalf("GET a stored response with etcd short of space: %d %.300s", code, body)
	}
	for _, id := range stored[:4] {
		if code, body := d.call("DELETE", "/v1/responses/"+id, d.Key, nil); code != http.StatusOK {
			t.Fatalf("delete %s: %d %s", id, code, body)
		}
	}
	if _, err := cli.Delete(t.Context(), "e2e/fill/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, "etcd's space freed", func() bool { return ready.Etcd.Writes == "all" && len(ready.Etcd.Alarms) == 0 })
	if ready.Status != "ready" || ready.Etcd.Members[0].Size >= quota*8/10 {
		t.Fatalf("/readyz after the fill was deleted: %+v", ready)
	}
	if code, body := d.call("POST", "/v1/responses", d.Key, map[string]any{"model": "default", "input": "stored again", "previous_response_id": last}); code != http.StatusOK {
		t.Fatalf("continuing once space is back: %d %s", code, body)
	}
}

// devEtcd is a client of the running conch dev's etcd as root, with the
// certificate dev keeps in its data dir and the endpoint it logged.
func devEtcd(t *testing.T, d *dev) *clientv3.Client {
	t.Helper()
	var endpoints []string
	for line := range strings.SplitSeq(d.stderr.String(), "\n") {
		var rec struct {
			Msg       string
			Endpoints []string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "embedded etcd" {
			endpoints = rec.Endpoints
		}
	}
	if len(endpoints) == 0 {
		t.Fatal("conch dev logged no etcd endpoint")
	}
	certs, err := launch.MakeEtcdPKI(filepath.Join(d.DataDir, "pki"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ClientConfig(certs.CAFile, certs.Pairs[launch.EtcdRootCert])
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: endpoints, TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
