package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/conch-sh/conch/services/internal/contract"
)

const filesUsage = `usage: conch files <command> [flags] <args>

Commands (the workspace of --user, or CONCH_USER_ID):
  ls [path]                   list a directory (default /)
  get <path> [local]          download a file (local "-" is stdout)
  put <local> <path>          upload a file (local "-" is stdin; 100 MiB at most)
  rm [-r] <path>              delete a file, or a directory with -r
  mkdir <path>                create a directory and its parents
  url [--expires D] <path>    make a temporary public URL of a file
`

var filesGroup = &group{
	name:    "files",
	summary: "list, download, upload and share workspace files",
	usage:   filesUsage,
	args: map[string]arity{
		"ls": {0, 1}, "get": {1, 2}, "put": {2, 2}, "rm": {1, 1}, "mkdir": {1, 1}, "url": {1, 1},
	},
	flags: func(cmd string) *flag.FlagSet { return new(filesFlags).flagSet(cmd) },
}

// filesFlags are the values of the flags of a files command.
type filesFlags struct {
	Options
	user, progress string
	recursive      bool
	expires        time.Duration
}

// flagSet is the flag set of files command cmd, bound to f: what the
// command parses and what its help lists.
func (f *filesFlags) flagSet(cmd string) *flag.FlagSet {
	fs := f.newFlagSet("conch files")
	fs.StringVar(&f.user, "user", "", "the `USER` whose workspace to use (env CONCH_USER_ID); required")
	fs.StringVar(&f.progress, "progress", "auto", "progress bar on stderr, `WHEN`: auto (on a terminal), always or never")
	switch cmd {
	case "rm":
		fs.BoolVar(&f.recursive, "r", false, "delete a directory with its content")
	case "url":
		fs.DurationVar(&f.expires, "expires", time.Hour, "lifetime of the URL, at most 168h")
	}
	return fs
}

// Files runs `conch files …`.
func Files(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f filesFlags
	sub, rest, err := filesGroup.parse(stdout, args, f.flagSet)
	if err != nil {
		return err
	}
	if f.user == "" {
		f.user = os.Getenv("CONCH_USER_ID")
	}
	if f.user == "" {
		return Usagef("--user (or CONCH_USER_ID) is required: it names the workspace's user")
	}
	if f.progress != "auto" && f.progress != "always" && f.progress != "never" {
		return Usagef("--progress: want auto, always or never, got %q", f.progress)
	}
	c, err := NewClient(&f.Options)
	if err != nil {
		return Usagef("%v", err)
	}
	c.Header.Set("X-Shell-User-Id", f.user)
	fc := &filesCmd{c: c, o: &f.Options, stdout: stdout, stderr: stderr, progress: showProgress(f.progress, stderr)}
	switch sub {
	case "ls":
		p := "/"
		if len(rest) == 1 {
			p = rest[0]
		}
		return fc.ls(ctx, p)
	case "get":
		local := path.Base(rest[0])
		if len(rest) == 2 {
			local = rest[1]
		}
		return fc.get(ctx, rest[0], local)
	case "put":
		return fc.put(ctx, rest[0], rest[1])
	case "rm":
		return fc.rm(ctx, rest[0], f.recursive)
	case "mkdir":
		return fc.mkdir(ctx, rest[0])
	case "url":
		return fc.url(ctx, rest[0], f.expires)
	}
	return UnknownCommand("conch files", sub, filesGroup.next(""))
}

type filesCmd struct {
	c        *Client
	o        *Options
	stdout   io.Writer
	stderr   io.Writer
	progress bool
}

// fileEntry is an entry of the file API.
type fileEntry struct {
	Name     string      `json:"name"`
	Path     string      `json:"path"`
	Type     string      `json:"type"`
	Size     json.Number `json:"size"`
	Modified time.Time   `json:"modified"`
}

func q(p string) string { return url.QueryEscape(p) }

func (f *filesCmd) ls(ctx context.Context, p string) error {
	var out struct {
		Entries []fileEntry `json:"entries"`
	}
	if err := f.c.JSON(ctx, "GET", "/api/v1/shell/io/list?path="+q(p), nil, &out); err != nil {
		return err
	}
	if f.o.JSON() {
		return PrintJSON(f.stdout, out)
	}
	tw := tabwriter.NewWriter(f.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSIZE\tMODIFIED\tNAME")
	for _, e := range out.Entries {
		name := e.Name
		if e.Type == "dir" {
			name += "/"
		}
		size := string(e.Size)
		if e.Type != "file" {
			size = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Type, size, FormatTime(e.Modified), name)
	}
	return tw.Flush()
}

// get downloads to a temporary file renamed into place once complete, so
// a failed transfer never leaves a cut file under the wanted name.
func (f *filesCmd) get(ctx context.Context, remote, local string) error {
	req, err := f.c.Request(ctx, "GET", "/api/v1/shell/io/download?path="+q(remote), nil)
	if err != nil {
		return err
	}
	resp, err := f.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := f.meter(resp.Body, resp.ContentLength, "get "+remote)
	if local == "-" {
		_, err := io.Copy(f.stdout, body)
		body.done(err)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".part-*")
	if err != nil {
		return err
	}
	n, err := io.Copy(tmp, body)
	body.done(err)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("download cut short: %d of %d bytes", n, resp.ContentLength)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("get %s: %w", remote, err)
	}
	if !f.o.JSON() {
		fmt.Fprintf(f.stdout, "%s -> %s (%d bytes)\n", remote, local, n)
	}
	return nil
}

func (f *filesCmd) put(ctx context.Context, local, remote string) error {
	var r io.Reader
	size := int64(-1)
	if local == "-" {
		r = os.Stdin
	} else {
		file, err := os.Open(local)
		if err != nil {
			return err
		}
		defer file.Close()
		st, err := file.Stat()
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("put %s: not a regular file", local)
		}
		// Refused here, before a byte is sent, rather than by the
		// server once the limit's worth went up.
		if st.Size() > contract.MaxFileBytes {
			return fmt.Errorf("put %s: %d bytes is more than a file may hold (%d, %d MiB)", local, st.Size(), contract.MaxFileBytes, contract.MaxFileBytes>>20)
		}
		r, size = file, st.Size()
	}
	body := f.meter(io.NopCloser(r), size, "put "+remote)
	req, err := f.c.Request(ctx, "PUT", "/api/v1/shell/io/upload?path="+q(remote), body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	resp, err := f.c.Do(req)
	body.done(err)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var e fileEntry
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return fmt.Errorf("put %s: decode answer: %w", remote, err)
	}
	if f.o.JSON() {
		return PrintJSON(f.stdout, e)
	}
	fmt.Fprintf(f.stdout, "%s -> %s (%s bytes)\n", local, e.Path, e.Size)
	return nil
}

func (f *filesCmd) rm(ctx context.Context, p string, recursive bool) error {
	var out struct {
		Deleted json.Number `json:"deleted"`
	}
	if err := f.c.JSON(ctx, "DELETE", "/api/v1/shell/io/delete?path="+q(p)+"&recursive="+strconv.FormatBool(recursive), nil, &out); err != nil {
		// The server names its REST parameter; here it is a flag.
		var ae *APIError
		if errors.As(err, &ae) {
			ae.Message = strings.ReplaceAll(ae.Message, "recursive=true", "-r (conch files rm -r "+p+")")
		}
		return err
	}
	if f.o.JSON() {
		return PrintJSON(f.stdout, out)
	}
	fmt.Fprintf(f.stdout, "deleted %s (%s entries)\n", p, out.Deleted)
	return nil
}

func (f *filesCmd) mkdir(ctx context.Context, p string) error {
	var e fileEntry
	if err := f.c.JSON(ctx, "POST", "/api/v1/shell/io/mkdir", map[string]string{"path": p}, &e); err != nil {
		return err
	}
	if f.o.JSON() {
		return PrintJSON(f.stdout, e)
	}
	fmt.Fprintf(f.stdout, "created %s\n", e.Path)
	return nil
}

func (f *filesCmd) url(ctx context.Context, p string, expires time.Duration) error {
	if expires < time.Second || expires > 7*24*time.Hour {
		return Usagef("--expires: must be between 1s and 168h, got %v", expires)
	}
	var out struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	body := map[string]any{"path": p, "expires_in_seconds": int64(expires / time.Second)}
	if err := f.c.JSON(ctx, "POST", "/api/v1/shell/io/public-url", body, &out); err != nil {
		return err
	}
	if f.o.JSON() {
		return PrintJSON(f.stdout, out)
	}
	fmt.Fprintf(f.stdout, "%s\n(expires %s)\n", out.URL, FormatTime(out.ExpiresAt))
	return nil
}

// showProgress decides whether to draw progress bars on w.
func showProgress(mode string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressMin is the smallest transfer that gets a progress bar.
const progressMin = 1 << 20

// meteredReader counts bytes and draws a progress bar at most every
// progressEvery.
type meteredReader struct {
	io.ReadCloser
	w     io.Writer
	label string
	total int64
	on    bool

	mu    sync.Mutex
	n     int64
	start time.Time
	last  time.Time
}

const progressEvery = 200 * time.Millisecond

func (f *filesCmd) meter(r io.ReadCloser, total int64, label string) *meteredReader {
	return &meteredReader{ReadCloser: r, w: f.stderr, label: label, total: total, on: f.progress && (total < 0 || total >= progressMin), start: time.Now()}
}

func (m *meteredReader) Read(p []byte) (int, error) {
	n, err := m.ReadCloser.Read(p)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n += int64(n)
	if m.on && time.Since(m.last) >= progressEvery {
		m.last = time.Now()
		m.draw(false)
	}
	return n, err
}

// done draws the final state of the bar.
func (m *meteredReader) done(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on || m.n < progressMin && m.total < progressMin {
		return
	}
	m.draw(true)
	if err != nil {
		fmt.Fprintln(m.w, "  failed")
		return
	}
	fmt.Fprintln(m.w)
}

func (m *meteredReader) draw(final bool) {
	const width = 30
	elapsed := time.Since(m.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(m.n) / elapsed
	}
	bar := strings.Repeat("?", width)
	pct := ""
	if m.total > 0 {
		filled := int(float64(width) * float64(min(m.n, m.total)) / float64(m.total))
		bar = strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
		pct = fmt.Sprintf(" %3d%%", m.n*100/m.total)
	} else if final {
		bar = strings.Repeat("=", width)
	}
	total := "?"
	if m.total >= 0 {
		total = human(m.total)
	}
	fmt.Fprintf(m.w, "\r%s [%s]%s %s / %s  %s/s ", m.label, bar, pct, human(m.n), total, human(int64(rate)))
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for x := n / unit; x >= unit; x /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
