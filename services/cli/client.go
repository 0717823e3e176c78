// Package cli holds what conch's client commands share: finding the router
// and the API key, calling the REST API (docs/reference/rest-api.md), and
// printing results as text or JSON. Each command group lives in its own
// file; their help makes the CLI reference, docs/reference/cli.md.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// DefaultServer is the router address when neither --server, CONCH_URL
// nor conch login gives one.
const DefaultServer = "http://127.0.0.1:8080"

// DefaultDataDir is conch dev's data dir, where the client commands look
// for its API key last, when neither --data-dir nor CONCH_DATA_DIR gives
// one.
const DefaultDataDir = "./.conch"

// Options are the flags every client command takes.
type Options struct {
	Server  string
	APIKey  string
	DataDir string
	Output  string
}

// AddFlags defines the common client flags on fs. A flag the environment
// may give defaults to "" and is resolved by NewClient, so that its
// default, as help shows it, is the same in every environment.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Server, "server", "", "router `URL` (env CONCH_URL, else conch login's, else "+DefaultServer+")")
	fs.StringVar(&o.APIKey, "api-key", "", "API `KEY` (env CONCH_API_KEY, else conch login's, else <data-dir>/api-key)")
	fs.StringVar(&o.DataDir, "data-dir", "", "conch dev's data `DIR`, for its api-key file (env CONCH_DATA_DIR, else "+DefaultDataDir+")")
	fs.StringVar(&o.Output, "o", "text", "output `FORMAT`: text or json")
}

// newFlagSet is a flag set for the command named name, for its errors,
// with the common flags bound to o.
func (o *Options) newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o.AddFlags(fs)
	return fs
}

func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok && v != "" {
		return v
	}
	return def
}

// JSON reports whether -o json was asked for.
func (o *Options) JSON() bool { return o.Output == "json" }

// Client calls the router's REST API.
type Client struct {
	base string
	key  string
	http *http.Client
	// Header is added to every request (e.g. X-Shell-User-Id).
	Header http.Header
}

// NewClient returns a client for o, checking the flags. The server and
// the key come from the flags, else CONCH_URL and CONCH_API_KEY, else what
// conch login stored, else the default server and <data-dir>/api-key. The
// stored key goes only to the stored server.
func NewClient(o *Options) (*Client, error) {
	if o.Output != "text" && o.Output != "json" {
		return nil, fmt.Errorf("-o: want text or json, got %q", o.Output)
	}
	stored, err := loadCredentials()
	if err != nil {
		return nil, err
	}
	given := o.Server
	if given == "" {
		given = os.Getenv("CONCH_URL")
	}
	if given == "" {
		given = stored.Server
	}
	if given == "" {
		given = DefaultServer
	}
	server := strings.TrimRight(given, "/")
	if !strings.HasPrefix(server, "http://") && !strings.HasPrefix(server, "https://") {
		return nil, fmt.Errorf("--server: want an http:// or https:// URL, got %q", given)
	}
	key := o.APIKey
	if key == "" {
		key = os.Getenv("CONCH_API_KEY")
	}
	if key == "" && stored.APIKey != "" && stored.Server == server {
		key = stored.APIKey
	}
	if key == "" {
		dataDir := o.DataDir
		if dataDir == "" {
			dataDir = envOr("CONCH_DATA_DIR", DefaultDataDir)
		}
		b, err := os.ReadFile(filepath.Join(dataDir, "api-key"))
		if err != nil {
			return nil, fmt.Errorf("no API key: set --api-key or CONCH_API_KEY, run conch login (or run conch dev, which writes %s)", filepath.Join(dataDir, "api-key"))
		}
		key = strings.TrimSpace(string(b))
	}
	return &Client{base: server, key: key, http: &http.Client{Timeout: 0}, Header: http.Header{}}, nil
}

// APIError is an error answer of the router: its HTTP status and the
// error object of its envelope ({"error": {"type", "code", "message",
// "param"}}).
type APIError struct {
	Status  int
	Type    string
	Code    string
	Message string
	// Param is the request field at fault, "" for none.
	Param string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// Request builds a request to path with the key and the client's headers.
func (c *Client) Request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	// Says which surface answered, recorded beside the key (an approval's
	// approver); the key alone authenticates.
	req.Header.Set(tenant.ClientHeader, tenant.SurfaceCLI)
	for k, v := range c.Header {
		req.Header[k] = v
	}
	return req, nil
}

// Do sends req and returns the response when it succeeded (2xx); otherwise
// it returns an *APIError with the server's message.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return nil, apiError(resp.StatusCode, b)
}

// apiError reads an error answer: the envelope's error object, or, from
// something other than conch in front of it, the body as text.
func apiError(status int, b []byte) *APIError {
	var v struct {
		Error *struct {
			Type    string  `json:"type"`
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &v) == nil && v.Error != nil && v.Error.Message != "" {
		e := &APIError{Status: status, Type: v.Error.Type, Code: v.Error.Code, Message: v.Error.Message}
		if v.Error.Param != nil {
			e.Param = *v.Error.Param
		}
		return e
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = "no message"
	}
	return &APIError{Status: status, Message: msg}
}

// JSON sends a JSON body (nil for none) and decodes a JSON answer into out
// (nil to discard it).
func (c *Client) JSON(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := c.Request(ctx, method, path, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.DoJSON(req, out)
}

// DoJSON sends req and decodes a JSON answer into out (nil to discard it).
func (c *Client) DoJSON(req *http.Request, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// ErrUsage marks a command line that could not be understood; the command
// exits 2.
var ErrUsage = errors.New("usage")

// ErrInterrupted marks a command stopped by Ctrl-C; the command exits 130,
// as a shell reports a process killed by SIGINT.
var ErrInterrupted = errors.New("interrupted")

// ErrTimeout marks a command that ran out of time; the command exits 124,
// as timeout(1) does.
var ErrTimeout = errors.New("timed out")

// Usagef returns a UsageError with a message.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// FormatTime prints t for people, or "-" when zero.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// wantsHelp reports whether a command line asks for help (-h, --help or
// help, anywhere before "--"): help is printed without a key or a server,
// whatever else the line holds.
func wantsHelp(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-h" || a == "-help" || a == "--help" || i == 0 && a == "help":
			return true
		}
	}
	return false
}

// Table prints rows under a header, in aligned columns, as docker and
// kubectl do.
type Table struct{ w *tabwriter.Writer }

// NewTable starts a table with the column names header on w.
func NewTable(w io.Writer, header ...string) *Table {
	t := &Table{w: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.Row(header...)
	return t
}

// Row adds a row; an empty cell is shown as "-".
func (t *Table) Row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

// Flush writes the table out.
func (t *Table) Flush() error { return t.w.Flush() }
