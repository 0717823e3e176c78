package executor

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/egressproxy"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
)

// TestSandboxEgress checks, from inside real sandboxes, that the proxy is
// the only way out and lets through what the allowlist names alone, with
// an answer the model can read for everything else.
func TestSandboxEgress(t *testing.T) {
	in := testnet.Start(t)
	res := &testnet.Resolver{Internet: in, Names: map[string][]netip.Addr{
		"private.conch.test":  {netip.MustParseAddr("10.1.2.3")},
		"loopback.conch.test": {netip.MustParseAddr("127.0.0.1")},
		"metadata.conch.test": {netip.MustParseAddr("169.254.169.254")},
		"mixed.conch.test":    {netip.MustParseAddr("10.9.9.9"), in.Addr},
	}}
	head := in.ServeGit(t)
	x := startExecutor(t, WithEgress(egressproxy.New(egressproxy.Config{Resolver: res})))
	ctx := as(t, "acme")
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{
		Agent: "research",
		Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{
			"Allowed.Conch.Test", "*.wild.conch.test", "private.conch.test", "loopback.conch.test",
			"metadata.conch.test", "mixed.conch.test", "127.0.0.1", "169.254.169.254", "10.0.0.1", "fd00:ec2::254",
			in.HostAddr.String(),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetId()
	t.Cleanup(func() { _, _ = x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}) })
	if n := resp.GetSandbox().GetNetwork(); n.GetMode() != executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST || n.GetAllowedDomains()[0] != "allowed.conch.test" || len(n.GetPorts()) != 2 {
		t.Fatalf("network shown as %v", n)
	}
	run := func(t *testing.T, cmd string) (string, int32) {
		t.Helper()
		r, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd, TimeoutSeconds: 30, MaxOutputLength: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetOutcome().GetType() != executorv1.OutcomeType_OUTCOME_TYPE_EXIT {
			t.Fatalf("%s: %v", cmd, r)
		}
		return r.GetStdout() + r.GetStderr(), r.GetOutcome().GetExitCode()
	}
	refused := func(target string) string {
		return fmt.Sprintf("conch: egress to %s is not allowed by gateway research", target)
	}
	curl := "curl -sS --max-time 20 "
	cases := []struct {
		name, cmd string
		ok        bool
		want      string
	}{
		{"http by name", curl + "http://allowed.conch.test/x", true, testnet.Greeting + " allowed.conch.test/x"},
		{"https by name through CONNECT", curl + "-k https://allowed.conch.test/y", true, testnet.Greeting + " allowed.conch.test/y"},
		{"upper case and trailing dot", curl + "http://ALLOWED.conch.test./z", true, testnet.Greeting},
		{"suffix", curl + "-k https://a.b.wild.conch.test/", true, testnet.Greeting + " a.b.wild.conch.test/"},
		{"socks5 with the name resolved by the proxy", curl + "--proxy socks5h://127.0.0.1:3128 http://allowed.conch.test/s", true, testnet.Greeting + " allowed.conch.test/s"},
		{"python urllib", `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://allowed.conch.test/py").read().decode())'`, true, testnet.Greeting + " allowed.conch.test/py"},
		{"python urllib https", `python3 -c 'import ssl, urllib.request; print(urllib.request.urlopen("https://allowed.conch.test/pys", context=ssl._create_unverified_context()).read().decode())'`, true, testnet.Greeting},
		{"git ls-remote over http", "git ls-remote http://allowed.conch.test/git/repo.git", true, head + "\trefs/heads/main"},
		{"git ls-remote over https, through a tunnel", "GIT_SSL_NO_VERIFY=1 git ls-remote https://allowed.conch.test/git/repo.git", true, head + "\trefs/heads/main"},
		{"git ls-remote to a name not listed", "git ls-remote https://denied.conch.test/git/repo.git 2>&1", false, "403"},
		{"pip download through a tunnel", "python3 -m pip download -q --no-deps --no-cache-dir --disable-pip-version-check -d /tmp/dl --index-url https://allowed.conch.test/simple/ --trusted-host allowed.conch.test conchdemo && ls /tmp/dl", true, testnet.WheelName},
		{"pip refused for a name not listed", `python3 -m pip download -vvv --no-deps --no-cache-dir --disable-pip-version-check --retries 0 -d /tmp/dl2 --index-url https://denied.conch.test/simple/ conchdemo 2>&1 | grep -m1 "403"`, false, "Tunnel connection failed: 403"},
		{"name not listed", curl + "http://denied.conch.test/", true, refused("denied.conch.test:80")},
		{"suffix itself is not below it", curl + "http://wild.conch.test/", true, refused("wild.conch.test:80")},
		{"https name not listed", curl + "-v -k https://denied.conch.test/ 2>&1", false, "403"},
		{"python sees the refusal", `python3 -c '
import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://denied.conch.test/")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())'`, true, "403 " + refused("denied.conch.test:80")},
		{"port not listed", curl + "http://allowed.conch.test:8080/", true, refused("allowed.conch.test:8080") + ": port 8080 is not an allowed port"},
		{"IP literal not listed", curl + "http://" + in.Addr.String() + "/", true, refused(in.Addr.String() + ":80")},
		{"name resolving to a private address", curl + "http://private.conch.test/", true, "it resolves to 10.1.2.3, a private address"},
		{"name resolving to loopback", curl + "http://loopback.conch.test/", true, "it resolves to 127.0.0.1, a loopback address"},
		{"name resolving to the metadata address", curl + "http://metadata.conch.test/", true, "it resolves to 169.254.169.254, a link-local address"},
		{"a refused address is skipped for an allowed one", curl + "http://mixed.conch.test/m", true, testnet.Greeting + " mixed.conch.test/m"},
		{"loopback literal through the proxy", curl + "--noproxy '' http://127.0.0.1/", true, refused("127.0.0.1:80") + ": it is a loopback address"},
		{"metadata literal", curl + "http://169.254.169.254/latest/meta-data/", true, "it is a link-local address"},
		{"metadata IPv6 literal", curl + "-g http://[fd00:ec2::254]/", true, "is not allowed by gateway research: it is a private address"},
		{"private literal", curl + "http://10.0.0.1/", true, "it is a private address"},
		{"the executor host's own address", curl + "http://" + in.HostAddr.String() + "/", true, "it is an address of this node"},
		{"no way around the proxy", "curl -sS --max-time 5 --noproxy '*' http://" + in.Addr.String() + "/ 2>&1; echo exit=$?", true, "exit=7"},
		{"no raw sockets out", `python3 -c '
import socket
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("` + in.Addr.String() + `", 80)); print("connected")
except OSError as e:
    print("refused", e.errno)'`, true, "refused"},
		{"no DNS", `python3 -c '
import socket
try:
    socket.getaddrinfo("allowed.conch.test", 80); print("resolved")
except OSError:
    print("no resolution")'`, true, "no resolution"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code := run(t, c.cmd)
			if !strings.Contains(out, c.want) {
				t.Fatalf("%s:\n%s\nwant it to contain %q", c.cmd, out, c.want)
			}
			if c.ok && code != 0 && !strings.Contains(c.want, "exit=") {
				t.Fatalf("%s: exit %d\n%s", c.cmd, code, out)
			}
		})
	}
}

// TestSandboxWithoutNetworkHasNoProxy checks that a sandbox of mode none
// has no proxy variables and no way out.
func TestSandboxWithoutNetworkHasNoProxy(t *testing.T) {
	x := startExecutor(t)
	id := createSandbox(t, x, "acme")
	r, err := x.client.RunCommand(as(t, "acme"), &executorv1.RunCommandRequest{SandboxId: id, Command: "env | grep -ci proxy; ls /run/conch; curl -sS --max-time 5 http://127.0.0.1:3128/ 2>&1; echo exit=$?"})
	if err != nil {
		t.Fatal(err)
	}
	if out := r.GetStdout(); !strings.HasPrefix(out, "0\n") || strings.Contains(out, "egress") || !strings.Contains(out, "exit=7") {
		t.Fatalf("got %q", out)
	}
}

// TestSandboxSecrets checks that a secret bound to a domain reaches that
// domain in its header, over TLS the proxy terminates with the sandbox's
// own CA, while the sandbox only ever holds a placeholder, and that the
// placeholder goes nowhere else.
func TestSandboxSecrets(t *testing.T) {
	in := testnet.Start(t)
	const secret = "s3cr3t-value-4242"
	head := in.ServeGit(t)
	x := startExecutor(t, WithEgress(egressproxy.New(egressproxy.Config{Resolver: &testnet.Resolver{Internet: in}, UpstreamRoots: in.Roots})))
	ctx := as(t, "acme")
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{
		Agent: "research",
		Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"api.conch.test", "other.conch.test"},
			Secrets: []*executorv1.NetworkSecret{{Env: "API_TOKEN", Value: secret, Domains: []string{"api.conch.test"}, Header: "Authorization"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetId()
	t.Cleanup(func() { _, _ = x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}) })
	if s := resp.GetSandbox().GetNetwork().GetSecrets(); len(s) != 1 || s[0].GetValue() != "" || !s[0].GetValueSet() || s[0].GetEnv() != "API_TOKEN" {
		t.Fatalf("secrets shown as %v", s)
	}
	run := func(t *testing.T, cmd string) string {
		t.Helper()
		r, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd, TimeoutSeconds: 30, MaxOutputLength: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStdout() + r.GetStderr()
	}
	const cleartext = "conch: the secret for api.conch.test is only sent over https"
	cases := []struct{ name, cmd, want string }{
		{"curl over https, the proxy's CA trusted", `curl -sS -H "Authorization: Bearer $API_TOKEN" https://api.conch.test/headers`, "Authorization: Bearer " + secret},
		{"python over https", `python3 -c 'import os, urllib.request; print(urllib.request.urlopen(urllib.request.Request("https://api.conch.test/headers", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})).read().decode())'`, "Authorization: Bearer " + secret},
		{"plain http is refused", `curl -sS -H "Authorization: Bearer $API_TOKEN" http://api.conch.test/headers; curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $API_TOKEN" http://api.conch.test/headers`, cleartext + "\n403"},
		{"plain http to the https port is refused", `curl -sS -H "Authorization: Bearer $API_TOKEN" http://api.conch.test:443/headers`, cleartext},
		{"python over plain http sees the refusal", `python3 -c '
import os, urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request("http://api.conch.test/headers", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}))
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())'`, "403 " + cleartext},
		{"git over https verifies the proxy's CA", `git -c http.extraHeader="Authorization: Bearer $API_TOKEN" ls-remote https://api.conch.test/git/repo.git`, head + "\trefs/heads/main"},
		{"another host", `curl -sS -H "Authorization: Bearer $API_TOKEN" http://other.conch.test/headers`, "conch: egress to other.conch.test:80 is not allowed by gateway research: the request carries a secret's placeholder (header Authorization) that is not bound to this host"},
		{"another header", `curl -sS -H "X-Token: $API_TOKEN" https://api.conch.test/headers`, "(header X-Token) that is not bound"},
		{"an unbound host is tunnelled, not intercepted", `curl -sS -k https://other.conch.test/x`, testnet.Greeting + " other.conch.test/x"},
		{"the sandbox holds a placeholder", `echo "$API_TOKEN"`, "conch-secret-"},
		// The pattern matches the value without spelling it, so that the
		// command's own arguments do not. (/run/conch/agent, the test
		// binary here, holds this test's constants.)
		{"the value is nowhere in the sandbox", `p='` + secret[:len(secret)-1] + `[` + secret[len(secret)-1:] + `]'; ` +
			`echo env=$({ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline; } 2>/dev/null | grep -c "$p") files=$(grep -rls "$p" /run/conch/egress /run/conch/tools /tmp /home /etc | wc -l)`, "env=0 files=0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if out := run(t, c.cmd); !strings.Contains(out, c.want) {
				t.Fatalf("%s:\n%s\nwant %q", c.cmd, out, c.want)
			}
		})
	}
	t.Run("the refusal is in the command's record", func(t *testing.T) {
		s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: `curl -sS -H "Authorization: Bearer $API_TOKEN" http://api.conch.test/headers`})
		if err != nil {
			t.Fatal(err)
		}
		ev := collect(t, s)
		eg := ev.finished.GetEgress()
		if len(eg) != 1 || eg[0].GetDecision() != "refused" || eg[0].GetReason() != cleartext || eg[0].GetHost() != "api.conch.test" || eg[0].GetAddress() != "" {
			t.Fatalf("egress %v", eg)
		}
	})
	// What reached the internet: the secret only ever over TLS.
	delivered := false
	for _, r := range in.Requests() {
		if strings.Contains(r.Head, secret) {
			if !r.TLS {
				t.Fatalf("the internet read the secret in cleartext:\n%s", r.Head)
			}
			delivered = true
		}
	}
	if !delivered {
		t.Fatal("the secret never reached its domain")
	}
}

// TestEgressRecordKeepsDeliveries checks that a command's record keeps
// the connection that delivered data however many refused ones came
// before it, and says exactly how many it left out, in the result and in
// the audit trail.
func TestEgressRecordKeepsDeliveries(t *testing.T) {
	in := testnet.Start(t)
	st, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.NewWriter(audit.Config{Store: st, Etcd: etcdxtest.StartForTest(t), Name: "egress-test"})
	if err != nil {
		t.Fatal(err)
	}
	x := startExecutor(t, WithAudit(w), WithEgress(egressproxy.New(egressproxy.Config{Resolver: &testnet.Resolver{Internet: in}})))
	ctx := as(t, "acme")
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{
		Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"api.conch.test"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetId()
	t.Cleanup(func() { _, _ = x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}) })
	const refusals = 70
	cmd := fmt.Sprintf("for i in $(seq %d); do curl -s -o /dev/null http://denied$i.conch.test/; done; curl -sS http://api.conch.test/delivered", refusals)
	s, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: cmd, TimeoutSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	ev := collect(t, s)
	if !strings.Contains(ev.stdout.String(), testnet.Greeting+" api.conch.test/delivered") {
		t.Fatalf("output %q %q", ev.stdout.String(), ev.stderr.String())
	}
	wantOmitted := refusals - egress.MaxOtherReported
	delivered := func(host string, decision string, received int64) bool {
		return host == "api.conch.test" && decision == "allowed" && received > 0
	}
	found := false
	for _, c := range ev.finished.GetEgress() {
		found = found || delivered(c.GetHost(), c.GetDecision(), c.GetBytesReceived())
	}
	if !found || int(ev.finished.GetEgressOmitted()) != wantOmitted || len(ev.finished.GetEgress()) != egress.MaxOtherReported+1 {
		t.Fatalf("result: %d connections, delivery kept %v, %d omitted (want %d)", len(ev.finished.GetEgress()), found, ev.finished.GetEgressOmitted(), wantOmitted)
	}

	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, err := audit.Read(ctx, st, audit.Query{Accounts: []string{"acme"}})
	if err != nil {
		t.Fatal(err)
	}
	found, egressRecs, omitted := false, 0, -1
	for _, r := range recs {
		switch r.Kind {
		case audit.KindEgress:
			egressRecs++
			found = found || delivered(r.Egress.Host, r.Decision, r.Egress.BytesReceived)
		case audit.KindOutcome:
			omitted = int(r.Outcome.EgressOmitted)
		}
	}
	if !found || egressRecs != egress.MaxOtherReported+1 || omitted != wantOmitted {
		t.Fatalf("audit: %d egress records, delivery kept %v, outcome says %d omitted (want %d)", egressRecs, found, omitted, wantOmitted)
	}

}

// TestEgressBytesPerDay: an account's sandboxes spend its egress bytes of
// the day together; once spent, every one of them is refused with the
// quota's message, and the executor's count is in etcd for the others.
func TestEgressBytesPerDay(t *testing.T) {
	in := testnet.Start(t)
	res := &testnet.Resolver{Internet: in}
	q := quotas.Defaults
	q.EgressBytesPerDay = 4000
	x := startExecutor(t, WithEgress(egressproxy.New(egressproxy.Config{Resolver: res})), WithQuotas(q))
	ctx := as(t, "acme")
	sandbox := func() string {
		resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Agent: "research",
			Network: &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"allowed.conch.test"}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetId()
	}
	run := func(id, cmd string) string {
		r, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd, TimeoutSeconds: 60, MaxOutputLength: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStdout() + r.GetStderr()
	}
	a, b := sandbox(), sandbox()
	const want = "quota egress_bytes_per_day exceeded"
	out := run(a, `for i in $(seq 40); do curl -sS --max-time 10 http://allowed.conch.test/x; echo; done`)
	if !strings.Contains(out, testnet.Greeting) || !strings.Contains(out, want) {
		t.Fatalf("a sandbox spending the day's bytes:\n%s\nwant greetings, then %q", out, want)
	}
	if out := run(b, `curl -sS --max-time 10 http://allowed.conch.test/y`); !strings.Contains(out, want) {
		t.Fatalf("another sandbox of the account: %s, want %q", out, want)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		total, _, err := quotas.ReadEgress(t.Context(), x.svc.etcd, "acme", quotas.Day(time.Now()), "")
		if err != nil {
			t.Fatal(err)
		}
		if total >= 4000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the executor's count in etcd is %d, want at least the quota", total)
		}
	}
}
