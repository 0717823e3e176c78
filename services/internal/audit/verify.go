package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/store"
)

// Problem names the first record of a chain that does not check out.
type Problem struct {
	Account string `json:"account"`
	Writer  string `json:"writer"`
	// Segment is the segment's key and Line the record's line in it
	// (1-based; 0 when the whole segment is at fault).
	Segment string `json:"segment"`
	Line    int    `json:"line"`
	Seq     int64  `json:"seq"`
	Reason  string `json:"reason"`
}

func (p Problem) String() string {
	return fmt.Sprintf("%s line %d (seq %d): %s", p.Segment, p.Line, p.Seq, p.Reason)
}

// Report is what Verify found for one account.
type Report struct {
	Account  string `json:"account"`
	Segments int    `json:"segments"`
	Records  int    `json:"records"`
	// Problem is the first bad record, nil when every chain checks out.
	Problem *Problem `json:"problem,omitempty"`
}

// Verify checks every chain of account: each record's hash, that it
// follows the one before (prev hash and seq), and that each segment ends
// on the hash etcd anchored for it. Segments removed by retention take
// their anchors with them; a chain may start after them. A pending
// anchor (Anchor.Pending) whose segment is absent is not a problem: its
// writer is writing it, or stopped before it stored it. Its work is
// linear in the segments and records it reads.
func Verify(ctx context.Context, st store.Store, cli *clientv3.Client, etcdPrefix, account string) (Report, error) {
	if etcdPrefix == "" {
		etcdPrefix = DefaultEtcdPrefix
	}
	resp, err := cli.Get(ctx, etcdPrefix+"anchors/"+url.PathEscape(account)+"/", clientv3.WithPrefix())
	if err != nil {
		return Report{Account: account}, fmt.Errorf("audit: read anchors: %w", err)
	}
	anchors := make([]Anchor, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		if err := json.Unmarshal(kv.Value, &anchors[i]); err != nil {
			return Report{Account: account}, fmt.Errorf("audit: anchor %s: %w", kv.Key, err)
		}
	}
	keys, err := segmentKeys(ctx, st, account, zeroTime, zeroTime)
	if err != nil {
		return Report{Account: account}, err
	}
	return checkChains(account, anchors, keys, func(key string) Segment { return readSegment(ctx, st, key) }), nil
}

// checkChains is Verify's check of account's anchors against its stored
// segment keys, each read once with read.
func checkChains(account string, anchors []Anchor, keys []string, read func(key string) Segment) Report {
	rep := Report{Account: account}
	bySegment := make(map[string]Anchor, len(anchors))
	for _, a := range anchors {
		bySegment[a.Key] = a
	}
	// Chains by writer, segments in order of their first seq.
	stored := make(map[string]bool, len(keys))
	byWriter := map[string][]segmentName{}
	for _, k := range keys {
		n := splitSegmentName(k)
		stored[k] = true
		byWriter[n.writer] = append(byWriter[n.writer], n)
	}
	for _, a := range anchors {
		// A pending anchor without its segment names records being
		// written, or never stored by a writer that stopped.
		if !stored[a.Key] && !a.Pending {
			n := splitSegmentName(a.Key)
			rep.Problem = &Problem{Account: account, Writer: n.writer, Segment: a.Key, Seq: n.seq, Reason: fmt.Sprintf("segment is missing (anchored records %d-%d)", a.First, a.Last)}
			return rep
		}
	}
	writers := make([]string, 0, len(byWriter))
	for w := range byWriter {
		writers = append(writers, w)
	}
	slices.Sort(writers)
	for _, w := range writers {
		segs := byWriter[w]
		slices.SortFunc(segs, func(a, b segmentName) int { return cmp.Compare(a.seq, b.seq) })
		var prevHash string
		var prevSeq int64
		for i, n := range segs {
			k := n.key
			rep.Segments++
			a, anchored := bySegment[k]
			if !anchored {
				rep.Problem = &Problem{Account: account, Writer: w, Segment: k, Reason: "segment has no anchor in etcd"}
				return rep
			}
			seg := read(k)
			first := i == 0 && a.First > 1 // older segments expired
			for j, r := range seg.Records {
				bad := func(reason string) Report {
					rep.Problem = &Problem{Account: account, Writer: w, Segment: k, Line: j + 1, Seq: r.Seq, Reason: reason}
					return rep
				}
				h, err := r.digest()
				switch {
				case err != nil:
					return bad(err.Error())
				case h != r.Hash:
					return bad("edited: hash does not match content")
				case r.Account != account || r.Writer != w:
					return bad("belongs to another chain")
				case first && j == 0:
					// The chain starts here; retention removed what came before.
				case r.Seq != prevSeq+1:
					return bad(fmt.Sprintf("out of order or a record is missing before it: seq %d follows %d", r.Seq, prevSeq))
				case r.Prev != prevHash:
					return bad("out of order or a record is missing before it: prev hash does not match")
				}
				prevHash, prevSeq = r.Hash, r.Seq
				rep.Records++
			}
			if seg.Bad != nil {
				rep.Problem = &Problem{Account: account, Writer: w, Segment: k, Line: seg.BadLine, Seq: prevSeq + 1, Reason: seg.Bad.Error()}
				return rep
			}
			if prevHash != a.Hash || prevSeq != a.Last {
				rep.Problem = &Problem{Account: account, Writer: w, Segment: k, Line: len(seg.Records) + 1, Seq: prevSeq + 1,
					Reason: fmt.Sprintf("records missing at the end: segment ends at seq %d, anchored up to %d", prevSeq, a.Last)}
				return rep
			}
		}
	}
	return rep
}

// segmentName is a segment's key and the writer and first seq it names.
type segmentName struct {
	key    string
	writer string
	seq    int64
}

// splitSegmentName reads the writer and first seq in a segment's key.
func splitSegmentName(key string) segmentName {
	name := key[strings.LastIndex(key, "/")+1:]
	name = strings.TrimSuffix(name, ".jsonl.gz")
	i := strings.LastIndex(name, "-")
	if i < 0 {
		return segmentName{key: key, writer: name}
	}
	seq, _ := strconv.ParseInt(name[i+1:], 10, 64)
	return segmentName{key: key, writer: name[:i], seq: seq}
}

var zeroTime time.Time
