// Package toolshim is both ends of the channel between a sandbox's tool
// commands and the executor (docs/reference/tools.md): the manifest and wire
// format, the command that runs inside the sandbox when the conch binary is
// invoked under a tool's name, and the host side that serves one sandbox's
// calls.
package toolshim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/toolcli"
)

// Names of the files in a sandbox's tools directory.
const (
	ManifestFile = "manifest.json"
	SocketFile   = "sock"
)

// maxMessage bounds one request or answer on the socket.
const maxMessage = 4 << 20

// Tool is one tool in the manifest.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"parameters_schema"`
}

// Manifest lists a sandbox's tool commands.
type Manifest struct {
	Tools []Tool `json:"tools"`
}

// Lookup finds a tool by the name it was invoked as; a name with "-" also
// matches the tool with "_".
func (m *Manifest) Lookup(name string) (Tool, bool) {
	for _, t := range m.Tools {
		if t.Name == name || strings.ReplaceAll(t.Name, "_", "-") == name {
			return t, true
		}
	}
	return Tool{}, false
}

// TraceparentEnv is the variable that carries a command's trace context
// into the sandbox, as OpenTelemetry names it for processes.
const TraceparentEnv = "TRACEPARENT"

// Request is a tool call from the sandbox.
type Request struct {
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// Traceparent is the TRACEPARENT the command was started with: the
	// W3C trace context of the call that runs it.
	Traceparent string `json:"traceparent,omitempty"`
}

// Answer is the executor's reply.
type Answer struct {
	Output  string `json:"output"`
	IsError bool   `json:"is_error"`
	// Error is set when the call could not be made at all.
	Error string `json:"error,omitempty"`
}

// Command returns the tool name the conch binary was invoked as, when the
// manifest in dir (a sandbox's tools directory) lists it; ok is false
// otherwise, and always for the binary's own names.
func Command(argv0, dir string) (string, bool) {
	name := filepath.Base(argv0)
	if name == "conch" || name == "agent" || strings.HasPrefix(name, "conch") {
		return "", false
	}
	m, err := readManifest(dir)
	if err != nil {
		return "", false
	}
	_, ok := m.Lookup(name)
	return name, ok
}

// Run runs the tool command name with args inside a sandbox: usage errors
// exit 2, a failed tool exits 1 with its message on stderr, and the tool's
// output goes to stdout so it can be piped.
func Run(dir, name string, args []string, stdout, stderr io.Writer) int {
	m, err := readManifest(dir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	t, ok := m.Lookup(name)
	if !ok {
		fmt.Fprintf(stderr, "%s: not a tool of this sandbox\n", name)
		return 127
	}
	cmd, err := toolcli.New(name, t.Description, t.Schema)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	parsed, err := cmd.Parse(args)
	switch {
	case errors.Is(err, toolcli.ErrHelp):
		fmt.Fprint(stdout, cmd.Help())
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n\n%s", name, err, cmd.Help())
		return 2
	}
	b, err := json.Marshal(parsed)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	ans, err := call(filepath.Join(dir, SocketFile), Request{Tool: t.Name, Arguments: string(b), Traceparent: os.Getenv(TraceparentEnv)})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if ans.Error != "" {
		fmt.Fprintf(stderr, "%s: %s\n", name, ans.Error)
		return 1
	}
	if ans.IsError {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimRight(ans.Output, "\n"))
		return 1
	}
	_, _ = io.WriteString(stdout, ans.Output)
	return 0
}

func readManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("read tool manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("tool manifest: %w", err)
	}
	return &m, nil
}

// call sends one request over the socket and reads the answer.
func call(sock string, req Request) (*Answer, error) {
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("reach the tool host: %w", err)
	}
	defer conn.Close()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("send the call: %w", err)
	}
	var ans Answer
	if err := json.NewDecoder(bufio.NewReader(io.LimitReader(conn, maxMessage))).Decode(&ans); err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	return &ans, nil
}
