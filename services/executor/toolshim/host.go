package toolshim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// callTimeout bounds one tool call from a sandbox.
const callTimeout = 5 * time.Minute

// Caller runs a tool call of a sandbox; the executor forwards it to the
// router's tool host. The request's Traceparent is the sandbox's word, to be
// trusted only as far as the caller can check it.
type Caller func(ctx context.Context, req Request) (output string, isError bool, err error)

// Host serves one sandbox's tool calls on the socket in its tools
// directory. The sandbox can ask for nothing but its own tools: each call
// names a tool, and the executor adds who calls.
type Host struct {
	lis    net.Listener
	tools  map[string]bool
	call   Caller
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Install writes the manifest and one command per tool (and a dashed alias
// for names with "_") into dir, the host side of a sandbox's ToolsDir, linked
// to target (the conch binary as the sandbox sees it), and starts serving
// calls. uid is the sandbox's host uid, which alone may connect.
func Install(dir, target string, uid int, tools []Tool, call Caller, log *slog.Logger) (*Host, error) {
	if log == nil {
		log = slog.Default()
	}
	names := map[string]bool{}
	for _, t := range tools {
		if t.Name == "" || strings.ContainsAny(t.Name, "/\x00") || t.Name == "." || t.Name == ".." || strings.HasPrefix(t.Name, "conch") {
			return nil, fmt.Errorf("toolshim: %q cannot be a command name", t.Name)
		}
		for _, n := range []string{t.Name, strings.ReplaceAll(t.Name, "_", "-")} {
			if names[n] {
				continue
			}
			names[n] = true
			if err := os.Symlink(target, filepath.Join(dir, n)); err != nil {
				return nil, fmt.Errorf("toolshim: command %s: %w", n, err)
			}
		}
	}
	b, err := json.Marshal(Manifest{Tools: tools})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o644); err != nil {
		return nil, fmt.Errorf("toolshim: manifest: %w", err)
	}
	sock := filepath.Join(dir, SocketFile)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("toolshim: listen: %w", err)
	}
	// Only the sandbox's own uid (and root) may connect.
	if err := os.Chown(sock, uid, uid); err != nil {
		lis.Close()
		return nil, fmt.Errorf("toolshim: socket owner: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("toolshim: socket mode: %w", err)
	}
	allowed := map[string]bool{}
	for _, t := range tools {
		allowed[t.Name] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Host{lis: lis, tools: allowed, call: call, log: log, cancel: cancel}
	h.wg.Add(1)
	go h.serve(ctx)
	return h, nil
}

func (h *Host) serve(ctx context.Context) {
	defer h.wg.Done()
	for {
		conn, err := h.lis.Accept()
		if err != nil {
			return
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer conn.Close()
			h.handle(ctx, conn)
		}()
	}
}

func (h *Host) handle(ctx context.Context, conn net.Conn) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_ = conn.SetDeadline(time.Now().Add(callTimeout))
	var req Request
	ans := Answer{}
	if err := json.NewDecoder(io.LimitReader(conn, maxMessage)).Decode(&req); err != nil {
		ans.Error = "malformed call"
	} else if !h.tools[req.Tool] {
		ans.Error = fmt.Sprintf("%q is not a tool of this sandbox", req.Tool)
	} else {
		out, isErr, err := h.call(ctx, req)
		if err != nil {
			ans.Error = err.Error()
		} else {
			ans.Output, ans.IsError = out, isErr
		}
	}
	if err := json.NewEncoder(conn).Encode(ans); err != nil {
		h.log.Debug("tool answer not delivered", "error", err)
	}
}

// Close stops serving and waits for calls in flight.
func (h *Host) Close() {
	h.cancel()
	_ = h.lis.Close()
	h.wg.Wait()
}
