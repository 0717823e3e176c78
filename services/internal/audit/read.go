package audit

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/store"
)

// Segment is one stored segment and the records read from it.
type Segment struct {
	Key     string
	Records []Record
	// Bad is set when the segment could not be read whole: Records hold
	// the lines before BadLine (1-based).
	Bad     error
	BadLine int
}

// Accounts lists the accounts that have audit records.
func Accounts(ctx context.Context, st store.Store) ([]string, error) {
	var out []string
	for info, err := range st.List(ctx, "audit/", false) {
		if err != nil {
			return nil, fmt.Errorf("audit: list accounts: %w", err)
		}
		if !info.IsDir() {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(info.Key, "audit/"), "/")
		if acc, err := url.PathUnescape(name); err == nil {
			out = append(out, acc)
		}
	}
	return out, nil
}

// segmentKeys lists account's segment keys of the hours from since to
// until (zero: unbounded), sorted by key.
func segmentKeys(ctx context.Context, st store.Store, account string, since, until time.Time) ([]string, error) {
	prefix := accountPrefix(account)
	var keys []string
	for info, err := range st.List(ctx, prefix, true) {
		if err != nil {
			if err == store.ErrNotFound {
				break
			}
			return nil, fmt.Errorf("audit: list segments: %w", err)
		}
		if info.IsDir() || !strings.HasSuffix(info.Key, ".jsonl.gz") {
			continue
		}
		rest := strings.TrimPrefix(info.Key, prefix)
		if len(rest) >= 13 {
			if h, err := time.Parse("2006-01-02/15", rest[:13]); err == nil {
				if !since.IsZero() && h.Add(time.Hour).Before(since) {
					continue
				}
				if !until.IsZero() && h.After(until) {
					continue
				}
			}
		}
		keys = append(keys, info.Key)
	}
	slices.Sort(keys)
	return keys, nil
}

// readSegment reads the records of one segment, stopping at the first line
// that does not decode.
func readSegment(ctx context.Context, st store.Store, key string) Segment {
	seg := Segment{Key: key}
	rc, _, err := st.Get(ctx, key)
	if err != nil {
		seg.Bad = fmt.Errorf("read: %w", err)
		return seg
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		seg.Bad, seg.BadLine = fmt.Errorf("decompress: %w", err), 1
		return seg
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			seg.Bad, seg.BadLine = fmt.Errorf("line %d does not decode: %w", line, err), line
			return seg
		}
		seg.Records = append(seg.Records, r)
	}
	if err := sc.Err(); err != nil {
		seg.Bad, seg.BadLine = fmt.Errorf("after line %d: %w", line, err), line+1
	}
	return seg
}

// Query selects records.
type Query struct {
	// Accounts to read; nil means every account (the admin's view).
	Accounts []string
	// Since and Until bound the records' time (zero: unbounded).
	Since, Until            time.Time
	Gateway, User, Decision string
	// Q matches a substring of the command, reason, approval id or who
	// answered.
	Q string
	// Limit is the page size; Before continues a page: the cursor of the
	// last record returned.
	Limit  int
	Before string
}

// cursorTime is fixed-width, so cursors sort as their records do.
const cursorTime = "2006-01-02T15:04:05.000000000Z"

// Cursor names a record's place in the newest-first order.
func (r Record) Cursor() string {
	return fmt.Sprintf("%s|%s|%020d", r.Time.UTC().Format(cursorTime), r.Writer, r.Seq)
}

func (q Query) match(r Record) bool {
	switch {
	case !q.Since.IsZero() && r.Time.Before(q.Since),
		!q.Until.IsZero() && r.Time.After(q.Until),
		q.Gateway != "" && r.Gateway != q.Gateway,
		q.User != "" && r.User != q.User,
		q.Decision != "" && r.Decision != q.Decision:
		return false
	}
	if q.Q != "" {
		return strings.Contains(r.Command, q.Q) || strings.Contains(r.Reason, q.Q) || r.ApprovalID == q.Q || strings.Contains(r.ResolvedBy, q.Q)
	}
	return true
}

// newer orders records newest first.
func newer(a, b Record) int {
	if c := b.Time.Compare(a.Time); c != 0 {
		return c
	}
	if c := strings.Compare(b.Writer, a.Writer); c != 0 {
		return c
	}
	return int(b.Seq - a.Seq)
}

// Read answers q from the stored segments, newest first; next is the
// cursor of the page after, or empty.
func Read(ctx context.Context, st store.Store, q Query) (recs []Record, next string, err error) {
	accounts := q.Accounts
	if accounts == nil {
		if accounts, err = Accounts(ctx, st); err != nil {
			return nil, "", err
		}
	}
	for _, acc := range accounts {
		keys, err := segmentKeys(ctx, st, acc, q.Since, q.Until)
		if err != nil {
			return nil, "", err
		}
		for _, k := range keys {
			seg := readSegment(ctx, st, k)
			for _, r := range seg.Records {
				if q.match(r) && (q.Before == "" || r.Cursor() < q.Before) {
					recs = append(recs, r)
				}
			}
		}
	}
	slices.SortFunc(recs, newer)
	if q.Limit > 0 && len(recs) > q.Limit {
		recs = recs[:q.Limit]
		next = recs[len(recs)-1].Cursor()
	}
	return recs, next, nil
}
