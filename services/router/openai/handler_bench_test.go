package openai

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/telemetry"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/toolhost"
)

// oneGateway is a gateway store of one gateway.
type oneGateway struct{ g *routerv1.Gateway }

func (s oneGateway) Get(_ context.Context, _, name string) (*routerv1.Gateway, error) {
	if name != s.g.GetName() {
		return nil, errs.New(errs.NotFound, "no gateway")
	}
	return s.g, nil
}

func (s oneGateway) List(context.Context, string) ([]*routerv1.Gateway, error) {
	return []*routerv1.Gateway{s.g}, nil
}

// noExecutor fails every call: a completion without tools makes none.
type noExecutor struct {
	executorv1.ExecutorServiceClient
}

// benchRequest is the benchmarks' chat completion request.
var benchRequest = []byte(`{"model":"bench","messages":[{"role":"user","content":"hi"}]}`)

// BenchmarkChatCompletion runs chat completions without tools through the
// /v1 handler in process (conch), under the router's HTTP telemetry with
// the process's telemetry set up as conch does, against a local fake
// upstream, for -cpuprofile and -memprofile (the end-to-end overhead is
// e2e's BenchmarkCompletionOverhead). bare-proxy sends the same requests
// through a bare httputil.ReverseProxy to the same upstream, served and
// called the same way: the floor of any hop that forwards a request.
// Each reports its p50 and the process's CPU time per completion (client
// and fake upstream included), which a loaded machine inflates less than
// wall time.
func BenchmarkChatCompletion(b *testing.B) {
	tel, err := telemetry.Setup(b.Context(), telemetry.Options{ServiceName: "conch-bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	b.Cleanup(up.Close)
	g := &routerv1.Gateway{Name: "bench", Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_OPENAI, BaseUrl: up.URL, Model: "m"}}
	// The upstream is on loopback: the operator allows it, as for an
	// on-premise model server.
	guard := outbound.Must(outbound.Options{Allow: []string{up.Listener.Addr().String()}})
	core, err := completion.New(completion.Options{
		Gateways: oneGateway{g}, Executor: noExecutor{}, Etcd: &clientv3.Client{}, Grants: &toolhost.Grants{}, HTTPClient: guard.Client(0),
	})
	if err != nil {
		b.Fatal(err)
	}
	h := NewHandler(core, nil, nil)
	scoped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(tenant.With(r.Context(), tenant.Scope{Account: "acct"})))
	})
	traced, err := telemetry.NewHTTPHandler(scoped, otel.GetTracerProvider(), otel.GetMeterProvider())
	if err != nil {
		b.Fatal(err)
	}
	upURL, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, hop := range []struct {
		name    string
		handler http.Handler
	}{{"conch", traced}, {"bare-proxy", httputil.NewSingleHostReverseProxy(upURL)}} {
		b.Run(hop.name, func(b *testing.B) {
			srv := httptest.NewServer(hop.handler)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var ds []time.Duration
			b.ReportAllocs()
			c0 := cpu()
			for b.Loop() {
				start := time.Now()
				resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(benchRequest))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
				ds = append(ds, time.Since(start))
			}
			b.ReportMetric(float64((cpu()-c0).Microseconds())/float64(b.N), "cpu-us/op")
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkParseRequest reads the request of BenchmarkChatCompletion, as
// each completion does before it calls the upstream.
func BenchmarkParseRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRequest(benchRequest); err != nil {
			b.Fatal(err)
		}
	}
}
