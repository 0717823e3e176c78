// Package load drives a conch cluster with concurrent chat completions, each
// running several shell commands, some needing an approval that an
// in-process approver answers and some on persistent workspaces, and
// reports throughput, latency and errors. Beyond the sustainable rate the
// only acceptable refusals are a 429 or 503 with Retry-After.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a run.
type Options struct {
	// URLs are the routers' base URLs: each client uses one, in turn.
	// Key is an API key of the account to use.
	URLs []string
	Key  string
	// Phases run in order.
	Phases []Phase
	// Client makes the requests; nil means one with a 5-minute timeout.
	Client *http.Client
	// Log receives progress; nil means none.
	Log io.Writer
	// CPU, when set, reads the CPU time the cluster's processes have
	// used so far, by kind (localcluster.State.CPU): each phase reports
	// what its completions cost each kind.
	CPU func() (map[string]time.Duration, error)
}

// Phase is a steady number of clients, each sending one completion after
// another, for a duration.
type Phase struct {
	Name        string
	Concurrency int
	Duration    time.Duration
	// Overload says load beyond capacity is expected: 429/503 with
	// Retry-After are counted as shed, not as errors.
	Overload bool
}

// Result is a phase's outcome.
type Result struct {
	Phase       string         `json:"phase"`
	Concurrency int            `json:"concurrency"`
	Seconds     float64        `json:"seconds"`
	Completions int            `json:"completions"`
	PerSecond   float64        `json:"completions_per_second"`
	P50ms       float64        `json:"p50_ms"`
	P99ms       float64        `json:"p99_ms"`
	Commands    int            `json:"shell_commands"`
	Approvals   int            `json:"approvals_answered"`
	Shed        int            `json:"shed"`
	Errors      int            `json:"errors"`
	ErrorKinds  map[string]int `json:"error_kinds,omitempty"`
	ByKind      map[string]int `json:"completions_by_kind"`
	// Cores is the machine's; LoadAverage its 1-minute load average at
	// the phase's end; Busy the share of its cores' time spent busy
	// during the phase.
	Cores       int     `json:"cores"`
	LoadAverage float64 `json:"load_average_1m"`
	Busy        float64 `json:"machine_busy"`
	// CPUPerCompletion is the CPU time, in milliseconds per completion
	// served, of each kind of the cluster's processes (Options.CPU), of
	// this load client ("load client") and of whatever else ran on the
	// machine meanwhile ("other").
	CPUPerCompletion map[string]float64 `json:"cpu_ms_per_completion,omitempty"`
}

// The gateways a run uses, created when missing.
const (
	gwShell      = "load-shell"
	gwApproval   = "load-approval"
	gwPersistent = "load-persistent"
)

// Run sets up the gateways, starts the approver and runs the phases.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	}
	if len(opts.URLs) == 0 {
		return nil, errors.New("load: no router URL")
	}
	clients := make([]*client, len(opts.URLs))
	for i, u := range opts.URLs {
		clients[i] = &client{url: strings.TrimRight(u, "/"), key: opts.Key, http: opts.Client}
	}
	c := clients[0]
	if err := c.setup(ctx); err != nil {
		return nil, err
	}
	actx, stop := context.WithCancel(ctx)
	defer stop()
	var approved counter
	go c.approve(actx, &approved)
	var out []Result
	for _, ph := range opts.Phases {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "phase %s: %d clients for %v\n", ph.Name, ph.Concurrency, ph.Duration)
		}
		before := approved.get()
		m0, err := readMachine()
		if err != nil {
			return nil, err
		}
		var c0 map[string]time.Duration
		if opts.CPU != nil {
			if c0, err = opts.CPU(); err != nil {
				return nil, err
			}
		}
		r := phase(ctx, clients, ph)
		r.Approvals = approved.get() - before
		if err := r.account(m0, c0, opts.CPU); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type client struct {
	url, key string
	http     *http.Client
}

// do sends a JSON request and returns the status, headers and body.
func (c *client) do(ctx context.Context, method, path string, body any) (int, http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

func (c *client) setup(ctx context.Context) error {
	gws := []map[string]any{
		{"name": gwShell, "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"enabled": true}},
		{"name": gwApproval, "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"enabled": true},
			"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}},
		{"name": gwPersistent, "upstream": map[string]any{"provider": "scripted"}, "shell": map[string]any{"enabled": true, "allow_data_persistence": true}},
	}
	for _, g := range gws {
		code, _, body, err := c.do(ctx, "POST", "/api/v1/gateways", g)
		if err != nil {
			return fmt.Errorf("load: create gateway %s: %w", g["name"], err)
		}
		if code != http.StatusOK && code != http.StatusConflict {
			return fmt.Errorf("load: create gateway %s: %d %s", g["name"], code, body)
		}
	}
	for _, p := range []string{"/usr/bin/ls", "/usr/bin/cat"} {
		code, _, body, err := c.do(ctx, "POST", "/api/v1/exec-approvals/agents/"+gwApproval+"/allowlist", map[string]string{"pattern": p})
		if err != nil {
			return fmt.Errorf("load: allowlist %s: %w", p, err)
		}
		if code != http.StatusOK && code != http.StatusConflict {
			return fmt.Errorf("load: allowlist %s: %d %s", p, code, body)
		}
	}
	return nil
}

// approve answers the load gateway's pending approvals, as a human at the
// approvals page would, until ctx ends.
func (c *client) approve(ctx context.Context, n *counter) {
	for ctx.Err() == nil {
		code, _, body, err := c.do(ctx, "GET", "/api/v1/approvals?state=pending", nil)
		if err == nil && code == http.StatusOK {
			var list struct {
				Approvals []struct{ ID, Agent string } `json:"approvals"`
			}
			_ = json.Unmarshal(body, &list)
			for _, a := range list.Approvals {
				if a.Agent != gwApproval {
					continue
				}
				if code, _, _, err := c.do(ctx, "POST", "/api/v1/approvals/"+a.ID+":resolve", map[string]string{"decision": "allow-once"}); err == nil && code == http.StatusOK {
					n.add()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kind is one sort of completion of the mix.
type kind struct {
	name, gateway string
	weight        int
	user          bool   // a persistent workspace of one of a few users
	prompt        string // %d is a unique number
	commands      int
}

var mix = []kind{
	{name: "shell", gateway: gwShell, weight: 6, commands: 3,
		prompt: "run `cd /tmp` then `echo %d > f && cat f` then `ls -d /tmp`"},
	{name: "approval", gateway: gwApproval, weight: 2, commands: 2,
		prompt: "run `ls /` then `touch approved-%d`"},
	{name: "persistent", gateway: gwPersistent, weight: 2, user: true, commands: 2,
		prompt: "run `echo %d >> log.txt` then `tail -n 1 log.txt`"},
}

func pick() kind {
	total := 0
	for _, k := range mix {
		total += k.weight
	}
	n := rand.IntN(total)
	for _, k := range mix {
		if n < k.weight {
			return k
		}
		n -= k.weight
	}
	return mix[0]
}

// outcome is one completion's.
type outcome struct {
	kind    string
	latency time.Duration
	ok      bool
	shed    bool          // refused with 429/503 and Retry-After
	retry   time.Duration // the Retry-After of a shed one
	err     string        // the class of a failure
}

var seq struct {
	mu sync.Mutex
	n  int
}

func next() int {
	seq.mu.Lock()
	defer seq.mu.Unlock()
	seq.n++
	return seq.n
}

func (c *client) one(ctx context.Context) outcome {
	k := pick()
	n := next()
	req := map[string]any{
		"model":    k.gateway,
		"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf(k.prompt, n)}},
		"tools":    []map[string]string{{"type": "shell"}},
	}
	if k.user {
		req["user"] = fmt.Sprintf("load-user-%d", n%8)
	}
	start := time.Now()
	code, h, body, err := c.do(ctx, "POST", "/v1/chat/completions", req)
	o := outcome{kind: k.name, latency: time.Since(start)}
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return outcome{} // the phase ended mid-request
		}
		o.err = "transport: " + errClass(err)
	case (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) && h.Get("Retry-After") != "":
		o.shed, o.retry = true, retryAfter(h.Get("Retry-After"))
	case code != http.StatusOK:
		o.err = fmt.Sprintf("http %d", code)
	default:
		if msg := checkCompletion(body, k.commands); msg != "" {
			o.err = msg
		} else {
			o.ok = true
		}
	}
	return o
}

// retryAfter is a Retry-After in seconds, at most maxRetryWait; a value
// it cannot read waits a second.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return time.Second
	}
	return min(time.Duration(n)*time.Second, maxRetryWait)
}

// maxRetryWait bounds the wait of a shed client.
const maxRetryWait = 10 * time.Second

func errClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Timeout"):
		return "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		return "connection refused"
	case strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset"):
		return "connection closed"
	}
	return "other"
}

// checkCompletion returns "" when every shell command of the completion
// ran and exited 0, else what went wrong.
func checkCompletion(body []byte, commands int) string {
	var resp struct {
		Conch struct {
			Calls []struct{ Result string } `json:"server_tool_calls"`
		} `json:"conch"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return "bad completion JSON"
	}
	if len(resp.Conch.Calls) != commands {
		return fmt.Sprintf("%d of %d commands ran", len(resp.Conch.Calls), commands)
	}
	for _, c := range resp.Conch.Calls {
		var r struct {
			Error   string `json:"error"`
			Outcome struct {
				Type     string `json:"type"`
				ExitCode *int   `json:"exit_code"`
			} `json:"outcome"`
		}
		if err := json.Unmarshal([]byte(c.Result), &r); err != nil {
			return "bad command result"
		}
		if r.Outcome.Type != "exit" || r.Outcome.ExitCode == nil || *r.Outcome.ExitCode != 0 {
			msg := r.Error
			if len(msg) > 60 {
				msg = msg[:60]
			}
			return "command " + r.Outcome.Type + ": " + msg
		}
	}
	return ""
}

// phase runs ph's clients, spread over the routers.
func phase(ctx context.Context, clients []*client, ph Phase) Result {
	pctx, cancel := context.WithTimeout(ctx, ph.Duration)
	defer cancel()
	var (
		mu  sync.Mutex
		all []outcome
		wg  sync.WaitGroup
	)
	start := time.Now()
	for i := range ph.Concurrency {
		c := clients[i%len(clients)]
		wg.Go(func() {
			for pctx.Err() == nil {
				o := c.one(pctx)
				if o.kind == "" {
					return
				}
				mu.Lock()
				all = append(all, o)
				mu.Unlock()
				if o.shed {
					// A shed client waits as Retry-After asks, as the
					// official SDKs do, with jitter so that clients shed
					// together do not come back together.
					select {
					case <-pctx.Done():
					case <-time.After(o.retry/2 + rand.N(o.retry/2+1)):
					}
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	r := Result{Phase: ph.Name, Concurrency: ph.Concurrency, Seconds: secs, ErrorKinds: map[string]int{}, ByKind: map[string]int{}}
	var lat []time.Duration
	for _, o := range all {
		switch {
		case o.ok:
			r.Completions++
			r.ByKind[o.kind]++
			lat = append(lat, o.latency)
			for _, k := range mix {
				if k.name == o.kind {
					r.Commands += k.commands
				}
			}
		case o.shed && ph.Overload:
			r.Shed++
		case o.shed:
			r.Errors++
			r.ErrorKinds["shed below the overload phase"]++
		default:
			r.Errors++
			r.ErrorKinds[o.err]++
		}
	}
	r.PerSecond = float64(r.Completions) / secs
	if len(lat) > 0 {
		slices.Sort(lat)
		r.P50ms = ms(lat[len(lat)/2])
		r.P99ms = ms(lat[len(lat)*99/100])
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// account sets r's machine figures and CPU per completion from the
// readings taken before its phase, m0 and c0 (from cpu, nil without).
func (r *Result) account(m0 machine, c0 map[string]time.Duration, cpu func() (map[string]time.Duration, error)) error {
	m1, err := readMachine()
	if err != nil {
		return err
	}
	r.Cores, r.LoadAverage = runtime.NumCPU(), loadAverage()
	if t := m1.total - m0.total; t > 0 {
		r.Busy = float64(m1.busy-m0.busy) / float64(t)
	}
	if cpu == nil || r.Completions == 0 {
		return nil
	}
	c1, err := cpu()
	if err != nil {
		return err
	}
	per := func(d time.Duration) float64 { return ms(d) / float64(r.Completions) }
	r.CPUPerCompletion = map[string]float64{}
	known := m1.self - m0.self
	for k, v := range c1 {
		d := v - c0[k]
		known += d
		r.CPUPerCompletion[k] = per(d)
	}
	r.CPUPerCompletion["load client"] = per(m1.self - m0.self)
	r.CPUPerCompletion["other"] = per(max(m1.busy-m0.busy-known, 0))
	return nil
}

// Report is a run's: its phases and, when it ran, the floor.
type Report struct {
	Phases []Result     `json:"phases"`
	Floor  *FloorResult `json:"floor,omitempty"`
}

// Print writes a report as a table, with each phase's machine and CPU
// figures, and the floor's beside the phases'.
func Print(w io.Writer, rep Report) {
	rs := rep.Phases
	fmt.Fprintf(w, "%-12s %7s %8s %11s %9s %9s %9s %9s %6s %7s\n", "phase", "clients", "seconds", "completions", "per sec", "p50 ms", "p99 ms", "commands", "shed", "errors")
	for _, r := range rs {
		fmt.Fprintf(w, "%-12s %7d %8.1f %11d %9.1f %9.1f %9.1f %9d %6d %7d\n", r.Phase, r.Concurrency, r.Seconds, r.Completions, r.PerSecond, r.P50ms, r.P99ms, r.Commands, r.Shed, r.Errors)
		for k, n := range r.ErrorKinds {
			fmt.Fprintf(w, "    error %q: %d\n", k, n)
		}
		fmt.Fprintf(w, "    machine: %d cores, %.0f%% busy, load average %.1f\n", r.Cores, 100*r.Busy, r.LoadAverage)
		if len(r.CPUPerCompletion) > 0 {
			kinds := slices.Sorted(maps.Keys(r.CPUPerCompletion))
			var parts []string
			total := 0.0
			for _, k := range kinds {
				parts = append(parts, fmt.Sprintf("%s %.1f", k, r.CPUPerCompletion[k]))
				total += r.CPUPerCompletion[k]
			}
			fmt.Fprintf(w, "    CPU ms per completion: %.1f (%s)\n", total, strings.Join(parts, ", "))
		}
	}
	if f := rep.Floor; f != nil {
		fmt.Fprintf(w, "%-12s %7d %8.1f %11d %9.1f %9s %9s %9d\n", "floor", f.Concurrency, f.Seconds, f.Completions, f.PerSecond, "", "", f.Commands)
		for _, r := range rs {
			if r.Concurrency == f.Concurrency && f.PerSecond > 0 {
				fmt.Fprintf(w, "    %s: %.2f of the floor's completions per second\n", r.Phase, r.PerSecond/f.PerSecond)
			}
		}
	}
}
