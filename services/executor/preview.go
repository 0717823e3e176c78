package executor

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// A preview runs an asked command on a throwaway copy of its sandbox
// before anyone is asked (gateway exec.preview): the copy has the
// sandbox's files and limits but no network, no egress secrets, no tool
// commands and no persistent workspace, and ends with the preview. It
// shows the approver what the command did there; the real sandbox is
// untouched until a human allows, and then runs the judged plan as
// always. A preview that cannot be made says why, and the human is
// asked all the same.
const (
	// previewCopyTimeout bounds making the copy, beside the command's
	// own preview timeout.
	previewCopyTimeout = time.Minute
	// previewListing bounds the listing of a copy's files: past it the
	// changes are those of the files listed.
	previewListing = 8 << 20
	// listCommand lists what a command may change: type, size, mode,
	// modification time and path of every entry, NUL-separated.
	listCommand = `LC_ALL=C find /home/workspace /tmp -xdev -printf '%y %s %m %T@ %p\0' 2>/dev/null; true`
)

// preview runs p's command on a copy of e's sandbox, in dir.
func (s *Service) preview(ctx context.Context, account string, e *entry, p *ExecParams, dir string) *approvalv1.Preview {
	failed := func(format string, args ...any) *approvalv1.Preview {
		return &approvalv1.Preview{ExitCode: -1, Error: clip(fmt.Sprintf(format, args...), contract.PreviewOutputBytes)}
	}
	timeout := contract.DefaultPreviewTimeout
	if t := p.Settings.GetPreviewTimeoutSeconds(); t > 0 {
		timeout = min(time.Duration(t)*time.Second, contract.MaxPreviewTimeout)
	}
	cctx, cancel := context.WithTimeout(ctx, previewCopyTimeout)
	defer cancel()
	copies, ids, err := s.copies(cctx, account, e.sb.ID(), e, 1, func(cp *CreateParams) {
		cp.Network, cp.Tools, cp.Persistent, cp.Session = nil, nil, false, ""
		cp.Name, cp.Labels = "preview", nil
		cp.TTL, cp.Idle = previewCopyTimeout+timeout, previewCopyTimeout+timeout
	})
	if err != nil {
		return failed("no copy of the sandbox could be made: %s", errs.Public(err).Message)
	}
	defer func() { _ = s.destroy(context.WithoutCancel(ctx), ids[0]) }()
	c := copies[0]
	before, complete, err := listFiles(cctx, c.sb)
	if err != nil {
		return failed("the copy's files could not be listed: %s", errs.Public(err).Message)
	}

	out, errOut := head(contract.PreviewOutputBytes), head(contract.PreviewOutputBytes)
	proc, err := c.sb.Start(sandbox.Options{
		Command: p.Command, Workdir: dir, Env: p.Env, Budget: contract.PreviewOutputBytes,
		OnOutput: func(st sandbox.Stream, b []byte) {
			if st == sandbox.Stderr {
				errOut.write(b)
			} else {
				out.write(b)
			}
		},
	})
	if err != nil {
		return failed("the command could not start on the copy: %s", errs.Public(err).Message)
	}
	pv := &approvalv1.Preview{}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-proc.Done():
	case <-timer.C:
		pv.TimedOut = true
		_ = proc.Kill()
		<-proc.Done()
	case <-ctx.Done():
		_ = proc.Kill()
		<-proc.Done()
		return failed("the request ended during the preview")
	}
	pv.ExitCode = int32(proc.Exit().Code)
	pv.Stdout, pv.Stderr = clip(out.String(), contract.PreviewOutputBytes), clip(errOut.String(), contract.PreviewOutputBytes)

	after, complete2, err := listFiles(cctx, c.sb)
	if err != nil {
		pv.Error = clip("the copy's files could not be listed after the command: "+err.Error(), contract.PreviewOutputBytes)
		return pv
	}
	if !complete || !complete2 {
		pv.Error = "the sandbox holds too many files to list: the changes are those of the files listed"
	}
	pv.Changes, pv.ChangesOmitted = diffFiles(before, after, contract.PreviewChanges)
	return pv
}

// fileState is what a listing says of one path.
type fileState struct {
	kind, mode, mtime string
	size              int64
}

// listFiles lists what a command may change in sb; complete is false when
// the listing was cut at previewListing.
func listFiles(ctx context.Context, sb *sandbox.Sandbox) (map[string]fileState, bool, error) {
	var buf bytes.Buffer
	var mu sync.Mutex
	proc, err := sb.Start(sandbox.Options{Command: listCommand, Workdir: "/", Budget: previewListing, OnOutput: func(st sandbox.Stream, b []byte) {
		if st == sandbox.Stdout {
			mu.Lock()
			buf.Write(b)
			mu.Unlock()
		}
	}})
	if err != nil {
		return nil, false, err
	}
	select {
	case <-proc.Done():
	case <-ctx.Done():
		_ = proc.Kill()
		<-proc.Done()
		return nil, false, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	x := proc.Exit()
	if x.Err != nil {
		return nil, false, x.Err
	}
	files := map[string]fileState{}
	for rec := range strings.SplitSeq(buf.String(), "\x00") {
		f := strings.SplitN(rec, " ", 5)
		if len(f) != 5 {
			continue // the cut last record, or the trailing empty one
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		files[f[4]] = fileState{kind: f[0], size: size, mode: f[2], mtime: f[3]}
	}
	return files, !x.StdoutDropped, nil
}

// diffFiles returns the changes from before to after, sorted by path, at
// most max of them, and how many more there are.
func diffFiles(before, after map[string]fileState, max int) ([]*approvalv1.PreviewChange, int32) {
	var all []*approvalv1.PreviewChange
	add := func(path string, kind approvalv1.PreviewChangeKind, size int64) {
		all = append(all, &approvalv1.PreviewChange{Path: path, Change: kind, SizeBytes: size})
	}
	for path, a := range after {
		b, ok := before[path]
		switch {
		case !ok:
			add(path, approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_CREATED, a.size)
		case a != b && !(a.kind == "d" && b.kind == "d" && a.mode == b.mode):
			// A directory whose entries changed is not itself listed:
			// its entries are.
			add(path, approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_MODIFIED, a.size)
		}
	}
	for path, b := range before {
		if _, ok := after[path]; !ok {
			add(path, approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_DELETED, b.size)
		}
	}
	slices.SortFunc(all, func(x, y *approvalv1.PreviewChange) int { return strings.Compare(x.GetPath(), y.GetPath()) })
	omitted := 0
	if len(all) > max {
		omitted, all = len(all)-max, all[:max]
	}
	// Valid UTF-8 for the proto (a byte that is not shows as U+FFFD),
	// escaped by each surface as all tenant text.
	for _, c := range all {
		c.Path = clip(c.GetPath(), contract.PreviewPathBytes)
	}
	return all, int32(omitted)
}

// clip returns s as valid UTF-8 of at most n bytes, cut at a character.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
