// Package conchtest gives the suites that run conch as its own processes
// (the end-to-end and fault-injection suites) the binary under test.
package conchtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Binary returns the conch binary under test: $CONCH_BIN (set by
// `make test`, which builds conch-sandbox-agent beside it), else one built
// once into a temp dir, with the agent beside it.
var Binary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("CONCH_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "conch-test-")
	if err != nil {
		return "", err
	}
	for _, cmd := range []string{"conch", "conch-sandbox-agent"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "github.com/conch-sh/conch/services/cmd/"+cmd)
		if cmd == "conch-sandbox-agent" {
			build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build does
		}
		out, err := build.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", cmd, err, out)
		}
	}
	return filepath.Join(dir, "conch"), nil
})

// ShellResult is the JSON a model receives for a shell call
// (docs/reference/openai-api.md), as the suites read it back out of a
// completion.
type ShellResult struct {
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Error   string `json:"error"`
	Outcome struct {
		Type     string `json:"type"`
		ExitCode int    `json:"exit_code"`
	} `json:"outcome"`
}
