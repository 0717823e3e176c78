package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/coder/websocket"
	"golang.org/x/term"

	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// detachKey is Ctrl-], as telnet's: typed at the terminal it leaves the
// sandbox's shell running nothing (the shell ends with the connection).
const detachKey = 0x1d

// attach connects the user's terminal to a login shell in sandbox id:
// raw mode when stdin is a terminal, the window's size followed, Ctrl-]
// to detach. It returns the shell's exit status as an ExitError.
func attach(ctx context.Context, c *Client, id string, stdin io.Reader, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in, isTerm := stdin.(*os.File)
	isTerm = isTerm && term.IsTerminal(int(in.Fd()))
	rows, cols := 24, 80
	if isTerm {
		if w, h, err := term.GetSize(int(in.Fd())); err == nil {
			cols, rows = w, h
		}
	}
	u, err := url.Parse(c.base + "/api/v1/sandboxes/" + url.PathEscape(id) + "/terminal?rows=" + strconv.Itoa(rows) + "&cols=" + strconv.Itoa(cols))
	if err != nil {
		return err
	}
	h := http.Header{"Authorization": {"Bearer " + c.key}, tenant.ClientHeader: {tenant.SurfaceCLI}}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 1 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			return apiError(resp.StatusCode, b)
		}
		return fmt.Errorf("attach %s: %w", id, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	if isTerm {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return fmt.Errorf("attach: raw mode: %w", err)
		}
		defer term.Restore(int(in.Fd()), old) //nolint:errcheck
		fmt.Fprint(stderr, "[attached; Ctrl-] detaches]\r\n")
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if w, h, err := term.GetSize(int(in.Fd())); err == nil {
					b, _ := json.Marshal(map[string]any{"type": "resize", "rows": h, "cols": w})
					_ = conn.Write(ctx, websocket.MessageText, b)
				}
			}
		}()
	}
	detached := make(chan struct{})
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				data := buf[:n]
				if i := bytes.IndexByte(data, detachKey); i >= 0 && isTerm {
					_ = conn.Write(ctx, websocket.MessageBinary, data[:i])
					close(detached)
					cancel()
					return
				}
				if conn.Write(ctx, websocket.MessageBinary, data) != nil {
					return
				}
			}
			if err != nil {
				return // the shell reads its end of input as the connection's
			}
		}
	}()
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			select {
			case <-detached:
				fmt.Fprint(stderr, "\r\n[detached]\r\n")
				return nil
			default:
			}
			if s := websocket.CloseStatus(err); s == websocket.StatusNormalClosure {
				return nil
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) && ce.Reason != "" {
				return fmt.Errorf("attach %s: %s", id, ce.Reason)
			}
			return fmt.Errorf("attach %s: %w", id, err)
		}
		if typ == websocket.MessageBinary {
			if _, err := stdout.Write(b); err != nil {
				return err
			}
			continue
		}
		var m struct {
			Type     string `json:"type"`
			ExitCode *int   `json:"exit_code"`
			Reason   string `json:"reason"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m.Type {
		case "approval_pending":
			fmt.Fprint(stderr, "\r\n[waiting for a human to allow this terminal]\r\n")
		case "exit":
			if m.Reason != "" {
				fmt.Fprintf(stderr, "\r\n[%s]\r\n", m.Reason)
			}
			if m.ExitCode != nil && *m.ExitCode != 0 {
				return &ExitError{Code: *m.ExitCode}
			}
			return nil
		}
	}
}
