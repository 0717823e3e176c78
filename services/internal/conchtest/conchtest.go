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
// `make test`), else one built once into a temp dir.
var Binary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("CONCH_BIN"); bin != "" {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "conch-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "conch")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/conch-sh/conch/services/cmd/conch").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build conch: %v\n%s", err, out)
	}
	return bin, nil
})
