// Package quotas owns the per-account quotas: their names, the operator's
// defaults (Config, read by every service), an admin's overrides per
// account, the 429 a create beyond one gets (`quota sandboxes exceeded
// (10 of 10)`), and the claims that count what an account holds.
//
// A claim is one etcd key per thing held, under a prefix per kind and
// account, whose value says how much of each quota it takes (a sandbox
// takes one of "sandboxes" and its memory of "sandbox_memory_bytes"). A
// claim is made in one transaction that holds only while no other claim of
// the account changed since its usage was read, so that two creates racing
// for the last unit cannot both have it; it is deleted with what it
// counts, and put under the same lease when that ends on its own.
package quotas

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Kind names a quota.
type Kind string

// The quotas. Sandboxes counts sandboxes and containers alive, with their
// memory, pids and CPU in total.
const (
	Sandboxes           Kind = "sandboxes"
	SandboxMemoryBytes  Kind = "sandbox_memory_bytes"
	SandboxPids         Kind = "sandbox_pids"
	SandboxCPU          Kind = "sandbox_cpu_millicores"
	StoredResponses     Kind = "stored_responses"
	StoredResponseBytes Kind = "stored_response_bytes"
	PendingApprovals    Kind = "pending_approvals"
	Gateways            Kind = "gateways"
	APIKeys             Kind = "api_keys"
	MCPSessions         Kind = "mcp_sessions"
	EgressBytesPerDay   Kind = "egress_bytes_per_day"
	Skills              Kind = "skills"
	Snapshots           Kind = "snapshots"
	SnapshotBytes       Kind = "snapshot_bytes"
)

// Kinds are every quota, in the order they are shown.
var Kinds = []Kind{Sandboxes, SandboxMemoryBytes, SandboxPids, SandboxCPU, StoredResponses, StoredResponseBytes, PendingApprovals, Gateways, APIKeys, MCPSessions, EgressBytesPerDay, Skills, Snapshots, SnapshotBytes}

// Config is the operator's default quotas, for every account an admin did
// not give its own. Every service reads the same settings.
type Config struct {
	Sandboxes           int64 `flag:"quota-sandboxes" env:"CONCH_QUOTA_SANDBOXES" default:"20" usage:"sandboxes and containers one account may hold alive"`
	SandboxMemoryBytes  int64 `flag:"quota-sandbox-memory-bytes" env:"CONCH_QUOTA_SANDBOX_MEMORY_BYTES" default:"17179869184" usage:"memory limits of one account's live sandboxes, in total, in bytes"`
	SandboxPids         int64 `flag:"quota-sandbox-pids" env:"CONCH_QUOTA_SANDBOX_PIDS" default:"16384" usage:"pid limits of one account's live sandboxes, in total"`
	SandboxCPU          int64 `flag:"quota-sandbox-cpu-millicores" env:"CONCH_QUOTA_SANDBOX_CPU_MILLICORES" default:"16000" usage:"CPU limits of one account's live sandboxes, in total, in thousandths of a core"`
	StoredResponses     int64 `flag:"quota-stored-responses" env:"CONCH_QUOTA_STORED_RESPONSES" default:"2000" usage:"responses one account may keep stored (store: true)"`
	StoredResponseBytes int64 `flag:"quota-stored-response-bytes" env:"CONCH_QUOTA_STORED_RESPONSE_BYTES" default:"67108864" usage:"bytes of one account's stored responses, compressed, in total"`
	PendingApprovals    int64 `flag:"quota-pending-approvals" env:"CONCH_QUOTA_PENDING_APPROVALS" default:"100" usage:"approvals one account may have waiting at once"`
	Gateways            int64 `flag:"quota-gateways" env:"CONCH_QUOTA_GATEWAYS" default:"100" usage:"gateways one account may have"`
	APIKeys             int64 `flag:"quota-api-keys" env:"CONCH_QUOTA_API_KEYS" default:"100" usage:"API keys one account may have"`
	MCPSessions         int64 `flag:"quota-mcp-sessions" env:"CONCH_QUOTA_MCP_SESSIONS" default:"50" usage:"MCP sessions one account may hold open"`
	EgressBytesPerDay   int64 `flag:"quota-egress-bytes-per-day" env:"CONCH_QUOTA_EGRESS_BYTES_PER_DAY" default:"21474836480" usage:"bytes one account's sandboxes may send and receive through the egress proxy in a day (UTC), on every executor together"`
	Skills              int64 `flag:"quota-skills" env:"CONCH_QUOTA_SKILLS" default:"100" usage:"skills one account may keep uploaded (/v1/skills)"`
	Snapshots           int64 `flag:"quota-snapshots" env:"CONCH_QUOTA_SNAPSHOTS" default:"100" usage:"sandbox snapshots one account may keep"`
	SnapshotBytes       int64 `flag:"quota-snapshot-bytes" env:"CONCH_QUOTA_SNAPSHOT_BYTES" default:"21474836480" usage:"bytes of one account's sandbox snapshots, in total"`
}

// Defaults are the quotas of a Config no one set; they match the tags.
var Defaults = Config{
	Sandboxes: 20, SandboxMemoryBytes: 16 << 30, SandboxPids: 16384, SandboxCPU: 16000,
	StoredResponses: 2000, StoredResponseBytes: 64 << 20,
	PendingApprovals: 100, Gateways: 100, APIKeys: 100, MCPSessions: 50,
	EgressBytesPerDay: 20 << 30, Skills: 100,
	Snapshots: 100, SnapshotBytes: 20 << 30,
}

// Limits are an account's quotas, one per kind.
type Limits map[Kind]int64

// Limits returns the defaults as Limits.
func (c *Config) Limits() Limits {
	return Limits{
		Sandboxes: c.Sandboxes, SandboxMemoryBytes: c.SandboxMemoryBytes, SandboxPids: c.SandboxPids, SandboxCPU: c.SandboxCPU,
		StoredResponses: c.StoredResponses, StoredResponseBytes: c.StoredResponseBytes,
		PendingApprovals: c.PendingApprovals, Gateways: c.Gateways, APIKeys: c.APIKeys, MCPSessions: c.MCPSessions,
		EgressBytesPerDay: c.EgressBytesPerDay, Skills: c.Skills,
		Snapshots: c.Snapshots, SnapshotBytes: c.SnapshotBytes,
	}
}

// Validate checks that no default is negative.
func (c *Config) Validate() error {
	for _, k := range Kinds {
		if v := c.Limits()[k]; v < 0 {
			return config.Invalid("--quota-"+flagName(k), "must not be negative, got %d", v)
		}
	}
	return nil
}

func flagName(k Kind) string {
	b := []byte(k)
	for i, c := range b {
		if c == '_' {
			b[i] = '-'
		}
	}
	return string(b)
}

// With returns the defaults with an account's overrides over them.
func (c *Config) With(overrides map[string]int64) Limits {
	l := c.Limits()
	for k, v := range overrides {
		if _, ok := l[Kind(k)]; ok {
			l[Kind(k)] = v
		}
	}
	return l
}

// CheckOverrides refuses an override of no known quota, or a negative one.
func CheckOverrides(o map[string]int64) error {
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(Kinds, Kind(k)) {
			return errs.New(errs.InvalidArgument, "quotas: unknown quota %q (known: %v)", k, Kinds)
		}
		if o[k] < 0 {
			return errs.New(errs.InvalidArgument, "quotas.%s: must not be negative, got %d", k, o[k])
		}
	}
	return nil
}

// Exceeded is the error of a create beyond a quota: 429, naming it, with
// the code quota_exceeded.
func Exceeded(k Kind, used, limit int64) error {
	return errs.NewReason(errs.ResourceExhausted, errs.ReasonQuotaExceeded, "quota %s exceeded (%d of %d)", k, used, limit)
}

// Usage is how much of each quota an account holds.
type Usage map[Kind]int64

// ClaimPrefix is where the claims of kind (the quota a claim is counted
// under first: Sandboxes, StoredResponses, PendingApprovals) are kept.
func ClaimPrefix(kind Kind) string { return "conch/claims/" + string(kind) + "/" }

// accountPrefix is where account's claims of kind are.
func accountPrefix(kind Kind, account string) string { return ClaimPrefix(kind) + account + "/" }

// ClaimKey is the key of one claim.
func ClaimKey(kind Kind, account, id string) string { return accountPrefix(kind, account) + id }

// Read returns the usage of account's claims of kind, and the revision
// it was read at.
func Read(ctx context.Context, kv clientv3.KV, kind Kind, account string) (Usage, int64, error) {
	u, _, rev, err := read(ctx, kv, kind, account, "")
	return u, rev, err
}

// read is Read, with the claim id (when not "") as it was: its amounts
// (nil when there is none) and its create revision.
func read(ctx context.Context, kv clientv3.KV, kind Kind, account, id string) (Usage, *claimed, int64, error) {
	resp, err := kv.Get(ctx, accountPrefix(kind, account), clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, fmt.Errorf("quotas: read %s of %s: %w", kind, account, err)
	}
	key := ClaimKey(kind, account, id)
	u := Usage{}
	own := &claimed{}
	for _, kv := range resp.Kvs {
		var amounts Usage
		if err := json.Unmarshal(kv.Value, &amounts); err != nil {
			return nil, nil, 0, fmt.Errorf("quotas: claim %s: %w", kv.Key, err)
		}
		for k, v := range amounts {
			u[k] += v
		}
		if id != "" && string(kv.Key) == key {
			own.amounts, own.created = amounts, kv.CreateRevision
		}
	}
	return u, own, resp.Header.Revision, nil
}

// claimed is one claim as read.
type claimed struct {
	amounts Usage
	created int64
}

// Claim records that account holds one more thing of kind, identified by
// id and taking amounts (of kind and of other quotas counted with it),
// unless that takes the account beyond one of limits: then it is the
// Exceeded error of the first quota it would pass. opts go with the
// claim's put (a lease). ops are put in the same transaction, so that
// what is claimed and its claim are made together.
func Claim(ctx context.Context, kv clientv3.KV, kind Kind, account, id string, amounts Usage, limits Limits, opts []clientv3.OpOption, ops ...clientv3.Op) error {
	b, err := json.Marshal(amounts)
	if err != nil {
		return err
	}
	key := ClaimKey(kind, account, id)
	for {
		used, rev, err := Read(ctx, kv, kind, account)
		if err != nil {
			return err
		}
		if err := within(used, amounts, limits); err != nil {
			return err
		}
		// Holds while no claim of the account was made or changed since
		// the read: deletes only free room.
		unchanged := clientv3.Compare(clientv3.ModRevision(accountPrefix(kind, account)), "<", rev+1).WithPrefix()
		resp, err := kv.Txn(ctx).If(unchanged).Then(append([]clientv3.Op{clientv3.OpPut(key, string(b), opts...)}, ops...)...).Commit()
		if err != nil {
			return fmt.Errorf("quotas: claim %s of %s: %w", kind, account, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// Grow adds amounts (some may be negative) to the claim id, making it
// when there is none, unless what it adds takes account beyond limits;
// a claim whose amount of kind comes to zero or less is deleted. A claim
// shared by several things (the responses of one conversation) grows and
// shrinks with them. opts go with the claim's put (a lease: the last put
// decides when the claim expires) and ops in the same transaction. With
// existing, the claim must be there already: else the error is
// errs.NotFound, and nothing is done.
func Grow(ctx context.Context, kv clientv3.KV, kind Kind, account, id string, amounts Usage, limits Limits, existing bool, opts []clientv3.OpOption, ops ...clientv3.Op) error {
	key := ClaimKey(kind, account, id)
	for {
		used, own, rev, err := read(ctx, kv, kind, account, id)
		if err != nil {
			return err
		}
		if existing && own.amounts == nil {
			return errs.New(errs.NotFound, "quotas: no claim %s of %s", id, account)
		}
		grows := Usage{}
		for k, v := range amounts {
			if v > 0 {
				grows[k] = v
			}
		}
		if err := within(used, grows, limits); err != nil {
			return err
		}
		next := maps.Clone(own.amounts)
		if next == nil {
			next = Usage{}
		}
		for k, v := range amounts {
			next[k] += v
		}
		put := clientv3.OpDelete(key)
		if next[kind] > 0 {
			b, err := json.Marshal(next)
			if err != nil {
				return err
			}
			put = clientv3.OpPut(key, string(b), opts...)
		}
		// As in Claim, and the claim itself is the one read: not deleted
		// or made again since.
		unchanged := clientv3.Compare(clientv3.ModRevision(accountPrefix(kind, account)), "<", rev+1).WithPrefix()
		same := clientv3.Compare(clientv3.CreateRevision(key), "=", own.created)
		resp, err := kv.Txn(ctx).If(unchanged, same).Then(append([]clientv3.Op{put}, ops...)...).Commit()
		if err != nil {
			return fmt.Errorf("quotas: grow %s of %s: %w", kind, account, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// Check reports, without claiming, whether account has room for one more
// thing of kind taking amounts: the Exceeded error when it has not. A
// create that cannot know its size before it is made (a stored response)
// checks first, and claims once it knows.
func Check(ctx context.Context, kv clientv3.KV, kind Kind, account string, amounts Usage, limits Limits) error {
	used, _, err := Read(ctx, kv, kind, account)
	if err != nil {
		return err
	}
	return within(used, amounts, limits)
}

// within is the Exceeded error of the first quota that used plus amounts
// would pass.
func within(used, amounts Usage, limits Limits) error {
	for _, k := range Kinds {
		if a, ok := amounts[k]; ok && used[k]+a > limits[k] {
			return Exceeded(k, used[k], limits[k])
		}
	}
	return nil
}

// Restore puts a claim back as it was, whatever the account's usage: for
// a thing that is still held after its claim was lost with its lease.
func Restore(ctx context.Context, kv clientv3.KV, kind Kind, account, id string, amounts Usage, opts ...clientv3.OpOption) error {
	b, err := json.Marshal(amounts)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, ClaimKey(kind, account, id), string(b), opts...); err != nil {
		return fmt.Errorf("quotas: restore %s of %s: %w", kind, account, err)
	}
	return nil
}

// Release deletes a claim.
func Release(ctx context.Context, kv clientv3.KV, kind Kind, account, id string) error {
	if _, err := kv.Delete(ctx, ClaimKey(kind, account, id)); err != nil {
		return fmt.Errorf("quotas: release %s of %s: %w", kind, account, err)
	}
	return nil
}

// Count counts the keys under prefix for a create of one more, whose
// quota kind is limit: beyond it, the Exceeded error; else a compare that
// holds while no key under prefix was made or changed since the count,
// for the create's own transaction. Things kept one key each (gateways,
// API keys) need no claims of their own.
func Count(ctx context.Context, kv clientv3.KV, kind Kind, prefix string, limit int64) (clientv3.Cmp, error) {
	resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return clientv3.Cmp{}, fmt.Errorf("quotas: count %s: %w", kind, err)
	}
	if resp.Count+1 > limit {
		return clientv3.Cmp{}, Exceeded(kind, resp.Count, limit)
	}
	return clientv3.Compare(clientv3.ModRevision(prefix), "<", resp.Header.Revision+1).WithPrefix(), nil
}

// Day is the quota day of t: its date in UTC.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// EgressKey is where executor keeps its count of account's egress bytes
// on day. Every executor counts what its sandboxes move and puts its count
// there; an account's use of the day is the sum of them.
func EgressKey(account, day, executor string) string {
	return ClaimKey(EgressBytesPerDay, account, day+"/"+executor)
}

// ReadEgress is account's egress bytes on day, on every executor, and
// what executor alone counted.
func ReadEgress(ctx context.Context, kv clientv3.KV, account, day, executor string) (total, own int64, err error) {
	prefix := ClaimKey(EgressBytesPerDay, account, day+"/")
	resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, 0, fmt.Errorf("quotas: read egress of %s: %w", account, err)
	}
	for _, kv := range resp.Kvs {
		var u Usage
		if err := json.Unmarshal(kv.Value, &u); err != nil {
			return 0, 0, fmt.Errorf("quotas: egress count %s: %w", kv.Key, err)
		}
		total += u[EgressBytesPerDay]
		if string(kv.Key) == prefix+executor {
			own = u[EgressBytesPerDay]
		}
	}
	return total, own, nil
}
