package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Kinds of record.
const (
	// KindCommand is a command judged by the approval service.
	KindCommand = "command"
	// KindApproval is an approval event: created, resolved, expired,
	// abandoned or used.
	KindApproval = "approval"
	// KindOutcome is how a command the executor ran ended.
	KindOutcome = "outcome"
	// KindEgress is a network connection a sandbox's command made, or
	// was refused.
	KindEgress = "egress"
)

// Record is one entry of the audit trail. Prev and Hash chain it to the
// record written before it for the same account by the same writer.
type Record struct {
	// Writer and Seq place the record in its chain: Seq counts from 1 per
	// account and writer.
	Writer string `json:"writer"`
	Seq    int64  `json:"seq"`

	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Event is what happened to an approval (KindApproval).
	Event string `json:"event,omitempty"`

	Account string `json:"account"`
	User    string `json:"user,omitempty"`
	Session string `json:"session,omitempty"`
	// Gateway is the agent the command was run for.
	Gateway string `json:"gateway,omitempty"`
	Host    string `json:"host,omitempty"`
	Node    string `json:"node,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	Cwd     string `json:"cwd,omitempty"`
	// Command is the whole command as it was asked for.
	Command string `json:"command,omitempty"`
	// Argv holds each parsed segment's argv; Plan is the engine's plan.
	// ResolvedPaths of a verdict line up with Argv ("" for a segment
	// that resolved to no program), so that policy replay resolves each
	// program as it was resolved when the command was judged.
	Argv          [][]string `json:"argv,omitempty"`
	Plan          string     `json:"plan,omitempty"`
	ResolvedPaths []string   `json:"resolved_paths,omitempty"`
	// Exec holds the gateway's exec settings the command was judged under
	// (conch.approval.v1.ExecSettings as JSON), for policy replay.
	Exec json.RawMessage `json:"exec,omitempty"`

	Decision   string `json:"decision,omitempty"`
	Reason     string `json:"reason,omitempty"`
	ApprovalID string `json:"approval_id,omitempty"`
	// ResolvedBy is who answered an approval, as the approval service
	// recorded it from the authenticated caller; Surface is where.
	ResolvedBy string `json:"resolved_by,omitempty"`
	Surface    string `json:"surface,omitempty"`

	Outcome *Outcome `json:"outcome,omitempty"`
	Egress  *Egress  `json:"egress,omitempty"`
	TraceID string   `json:"trace_id,omitempty"`

	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// Outcome is how a run ended.
type Outcome struct {
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Error      string `json:"error,omitempty"`
	DurationMs int64  `json:"duration_ms"`
	// StdoutBytes and StderrBytes count the output returned; Truncated
	// says there was more, beyond the output cap, which is not counted.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	Truncated   bool  `json:"truncated,omitempty"`
	// ProcessID and OutputBytes are set for a command moved to the
	// background, recorded when its process ends: OutputBytes counts all it
	// wrote, stdout and stderr together.
	ProcessID   string `json:"process_id,omitempty"`
	OutputBytes int64  `json:"output_bytes,omitempty"`
	// EgressOmitted counts the sandbox's connections that ended while the
	// command ran and have no egress record of their own: the records
	// after the outcome keep every allowed connection up to a bound and
	// the first refused ones (package egress, Report), and this says
	// exactly how many more there were.
	EgressOmitted int32 `json:"egress_omitted,omitempty"`
}

// Egress is one connection of a sandbox; its Decision and Reason are the
// record's.
type Egress struct {
	Host          string `json:"host,omitempty"`
	Port          int32  `json:"port"`
	Address       string `json:"address,omitempty"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
	DurationMs    int64  `json:"duration_ms"`
}

// digest is the hash of r with its Hash field empty: it covers Prev, so
// each record's hash depends on every record before it in the chain.
func (r Record) digest() (string, error) {
	r.Hash = ""
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("audit: encode record: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// seal sets r's place in the chain after prev and its hash.
func (r *Record) seal(writer string, seq int64, prev string) error {
	r.Writer, r.Seq, r.Prev = writer, seq, prev
	h, err := r.digest()
	if err != nil {
		return err
	}
	r.Hash = h
	return nil
}
