package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// Help works on every client command and subcommand without a key or a
// server, and version names the build.
func TestCLIHelpAndVersion(t *testing.T) {
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gateways", "--help"}, "usage: conch gateways"},
		{[]string{"gateways", "create", "-h"}, "usage: conch gateways"},
		{[]string{"approvals", "--help"}, "usage: conch approvals"},
		{[]string{"approvals", "allowlist", "add", "--help"}, "usage: conch approvals"},
		{[]string{"nodes", "help"}, "usage: conch nodes"},
		{[]string{"audit", "-h"}, "usage: conch audit"},
		{[]string{"audit", "verify", "--help"}, "usage: conch audit"},
		{[]string{"files", "ls", "-h"}, "usage: conch files"},
		{[]string{"sandbox", "exec", "--help"}, "usage: conch sandbox"},
		{[]string{"chat", "-h"}, "usage: conch chat"},
		{[]string{"mcp", "-h"}, "usage: conch mcp"},
		{[]string{"version"}, "conch "},
		{[]string{"--version"}, "(commit "},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = cleanEnv() // no key, no server
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "unknown") && tc.args[0] != "version" && tc.args[0] != "--version" {
			t.Errorf("conch %v: %v\n%s", tc.args, err, out)
		}
	}
}

// An enum value that is no word of its field is refused in words.
func TestEnumErrorsInWords(t *testing.T) {
	d := startDev(t)
	code, body := d.call("POST", "/api/v1/gateways", d.Key, map[string]any{"name": "gx", "upstream": map[string]any{"provider": "gpt", "model": "m"}})
	if code != 400 || !strings.Contains(string(body), "provider: must be openai, anthropic or scripted") {
		t.Errorf("provider gpt: %d %s", code, body)
	}
}
