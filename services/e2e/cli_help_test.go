package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// Help works on every command and subcommand without a key or a server,
// each with its own usage, and exits 0; version names the build.
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
		{[]string{"gateways", "create", "-h"}, "usage: conch gateways create NAME"},
		{[]string{"approvals", "--help"}, "usage: conch approvals"},
		{[]string{"approvals", "allowlist", "add", "--help"}, "usage: conch approvals allowlist add AGENT PATTERN"},
		{[]string{"nodes", "help"}, "usage: conch nodes"},
		{[]string{"audit", "-h"}, "usage: conch audit"},
		{[]string{"audit", "verify", "--help"}, "usage: conch audit verify"},
		{[]string{"files", "ls", "-h"}, "usage: conch files ls"},
		{[]string{"sandbox", "exec", "--help"}, "usage: conch sandbox exec"},
		{[]string{"sandbox", "exec", "sb-1", "--help"}, "usage: conch sandbox exec"},
		{[]string{"nodes", "create", "-h"}, "usage: conch nodes create NAME"},
		{[]string{"login", "--help"}, "usage: conch login"},
		{[]string{"dev", "--help"}, "usage: conch dev [flags]"},
		{[]string{"router", "-h"}, "usage: conch router [flags]"},
		{[]string{"secrets", "rotate", "-h"}, "usage: conch secrets rotate [flags]"},
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
