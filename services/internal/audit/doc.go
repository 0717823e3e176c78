// Package audit keeps the audit trail (issue 17): one Record per command
// judged or run and per approval event, appended by the service that
// decided to gzip-compressed JSONL segments in the object store, one chain
// of hashes per account and writer, each segment's last hash anchored in
// etcd so that a removed, reordered or edited record is found by Verify.
//
// Layout in the object store, a segment per account and hour for each
// flush of a writer:
//
//	audit/<account>/<YYYY-MM-DD>/<HH>/<writer>-<first seq, 20 digits>.jsonl.gz
//
// and in etcd, one anchor per segment, put (pending) before the segment
// is stored and marked done after, so that a crash between the two never
// leaves a segment without its anchor:
//
//	<prefix>anchors/<account>/<writer>/<first seq, 20 digits>
//
// A Writer buffers records in memory up to a bound and writes them every
// FlushEvery (asynchronous: a crash loses at most that window; a store that
// is down never blocks a command, records beyond the bound are dropped and
// counted), or at once with WriteSync for gateways that ask for sync
// audit, which returns nil only once the records are stored and anchored.
package audit
