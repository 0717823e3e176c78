package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// streamCommand runs a sandbox command with "stream": true and copies its
// output to stdout and stderr as the server-sent events bring it; the
// exit event decides the result, as for a command run to its end.
func streamCommand(ctx context.Context, c *Client, path string, body map[string]any, stdout, stderr io.Writer) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	events, err := openEvents(ctx, c, "POST", path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer events.Close()
	var exit *struct {
		ExitCode *int   `json:"exit_code"`
		TimedOut bool   `json:"timed_out"`
		Error    string `json:"error"`
	}
	err = readEvents(events, func(name string, data []byte) error {
		switch name {
		case "stdout", "stderr":
			var d struct{ Data, Encoding string }
			if err := json.Unmarshal(data, &d); err != nil {
				return fmt.Errorf("%s event: %w", name, err)
			}
			out := []byte(d.Data)
			if d.Encoding == "base64" {
				if out, err = base64.StdEncoding.DecodeString(d.Data); err != nil {
					return fmt.Errorf("%s event: %w", name, err)
				}
			}
			w := stdout
			if name == "stderr" {
				w = stderr
			}
			_, err := w.Write(out)
			return err
		case "exit":
			return json.Unmarshal(data, &exit)
		case "error":
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			_ = json.Unmarshal(data, &e)
			return fmt.Errorf("%s", e.Error.Message)
		}
		return nil // approval and events of later versions
	})
	switch {
	case err != nil:
		return err
	case exit == nil:
		return fmt.Errorf("POST %s: the stream ended before the command did", path)
	case exit.TimedOut:
		return fmt.Errorf("command %w", ErrTimeout)
	case exit.Error != "":
		return fmt.Errorf("%s", exit.Error)
	case exit.ExitCode != nil && *exit.ExitCode != 0:
		return &ExitError{Code: *exit.ExitCode}
	}
	return nil
}

// openEvents makes a request that answers server-sent events (body, if
// any, is JSON) and returns the stream, which the caller closes.
func openEvents(ctx context.Context, c *Client, method, path string, body io.Reader) (io.ReadCloser, error) {
	req, err := c.Request(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// readEvents calls fn with each server-sent event's name and data.
func readEvents(r io.Reader, fn func(name string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var name string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if name != "" || data != nil {
				if err := fn(name, data); err != nil {
					return err
				}
			}
			name, data = "", nil
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
	return sc.Err()
}

// watchFiles prints a sandbox's file changes as the watch's server-sent
// events bring them, one line each ("create /home/workspace/a"; with
// asJSON the events' JSON), until the watch or the sandbox ends. What a
// flood left out is said on stderr.
func watchFiles(ctx context.Context, c *Client, path string, asJSON bool, stdout, stderr io.Writer) error {
	events, err := openEvents(ctx, c, "GET", path, nil)
	if err != nil {
		return err
	}
	defer events.Close()
	return readEvents(events, func(name string, data []byte) error {
		var e struct {
			Path     string                   `json:"path"`
			Op       string                   `json:"op"`
			Dropped  int                      `json:"dropped"`
			Overflow bool                     `json:"overflow"`
			Error    struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("%s event: %w", name, err)
		}
		switch name {
		case "change":
			if asJSON {
				_, err := fmt.Fprintf(stdout, "%s\n", data)
				return err
			}
			_, err := fmt.Fprintf(stdout, "%s %s\n", e.Op, e.Path)
			return err
		case "ready":
			fmt.Fprintf(stderr, "watching %s\n", e.Path)
		case "coalesced":
			if e.Overflow {
				fmt.Fprintln(stderr, "conch: the sandbox's kernel queue overflowed: some changes were not told")
			} else {
				fmt.Fprintf(stderr, "conch: %d changes not told (a flood)\n", e.Dropped)
			}
		case "error":
			return fmt.Errorf("%s", e.Error.Message)
		}
		return nil
	})
}
