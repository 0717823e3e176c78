// Package document is the exec-approvals document
// (docs/explanation/exec-policy.md): the same JSON shape as OpenClaw's
// exec-approvals.json, so a file exported from OpenClaw imports unchanged and
// fields conch does not know survive a round trip.
package document

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
)

// MaxBytes is the largest document accepted, below etcd's request limit.
const MaxBytes = 1 << 20

// Settings are the security, ask and fallback of the defaults or an agent,
// as OpenClaw writes them; empty means unset.
type Settings struct {
	Security        string `json:"security,omitempty"`
	Ask             string `json:"ask,omitempty"`
	AskFallback     string `json:"askFallback,omitempty"`
	AutoAllowSkills *bool  `json:"autoAllowSkills,omitempty"`
	// Denylist is conch's extension: rules no mode, allowlist entry or
	// approval overrides (the defaults' apply to every agent).
	Denylist []Entry `json:"denylist,omitempty"`
}

// Entry is one allowlist pattern with its bookkeeping.
type Entry struct {
	ID      string `json:"id"`
	Pattern string `json:"pattern"`
	// ArgPattern narrows the entry to arguments matching it (OpenClaw's
	// field; see policy.Entry).
	ArgPattern string `json:"argPattern,omitempty"`
	// Source says where the entry came from (OpenClaw's field, kept).
	Source           string `json:"source,omitempty"`
	LastUsedAt       int64  `json:"lastUsedAt,omitempty"`
	LastUsedCommand  string `json:"lastUsedCommand,omitempty"`
	LastResolvedPath string `json:"lastResolvedPath,omitempty"`

	extra map[string]json.RawMessage
}

// Agent is one agent's settings and allowlist.
type Agent struct {
	Settings
	Allowlist []Entry `json:"allowlist"`
	// Egress are the hosts a human allowed the agent's sandboxes to
	// connect to always, beyond its gateway's network allowlist.
	Egress []string `json:"egress,omitempty"`

	extra map[string]json.RawMessage
}

// Document is the whole exec-approvals document.
type Document struct {
	Version  int               `json:"version"`
	Defaults Settings          `json:"defaults"`
	Agents   map[string]*Agent `json:"agents"`

	extra         map[string]json.RawMessage
	defaultsExtra map[string]json.RawMessage
}

// Empty returns the document of an account that never stored one.
func Empty() *Document {
	return &Document{Version: 1, Agents: map[string]*Agent{}}
}

// InvalidError says why a document was refused.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return "exec-approvals: " + e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// splitKnown decodes b into known (a pointer to a struct of known fields)
// and returns the fields it does not know.
func splitKnown(b []byte, known any, names ...string) (map[string]json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	if all == nil {
		return nil, errors.New("want an object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(known); err != nil {
		return nil, err
	}
	for _, n := range names {
		delete(all, n)
	}
	if len(all) == 0 {
		return nil, nil
	}
	return all, nil
}

// mergeKnown marshals known and adds extra fields back.
func mergeKnown(known any, extra map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(known)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range extra {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

var settingsNames = []string{"security", "ask", "askFallback", "autoAllowSkills", "denylist"}

// UnmarshalJSON keeps unknown fields.
func (e *Entry) UnmarshalJSON(b []byte) error {
	type plain Entry
	var p plain
	extra, err := splitKnown(b, &p, "id", "pattern", "argPattern", "source", "lastUsedAt", "lastUsedCommand", "lastResolvedPath")
	if err != nil {
		return err
	}
	*e = Entry(p)
	e.extra = extra
	return nil
}

// MarshalJSON writes unknown fields back.
func (e Entry) MarshalJSON() ([]byte, error) {
	type plain Entry
	return mergeKnown(plain(e), e.extra)
}

// UnmarshalJSON keeps unknown fields.
func (a *Agent) UnmarshalJSON(b []byte) error {
	type plain Agent
	var p plain
	extra, err := splitKnown(b, &p, append(slices.Clone(settingsNames), "allowlist", "egress")...)
	if err != nil {
		return err
	}
	*a = Agent(p)
	a.extra = extra
	return nil
}

// MarshalJSON writes unknown fields back.
func (a Agent) MarshalJSON() ([]byte, error) {
	type plain Agent
	p := plain(a)
	if p.Allowlist == nil {
		p.Allowlist = []Entry{}
	}
	return mergeKnown(p, a.extra)
}

// UnmarshalJSON keeps unknown fields.
func (d *Document) UnmarshalJSON(b []byte) error {
	type plain Document
	var p plain
	extra, err := splitKnown(b, &p, "version", "defaults", "agents")
	if err != nil {
		return err
	}
	*d = Document(p)
	d.extra = extra
	var top struct {
		Defaults json.RawMessage `json:"defaults"`
	}
	if err := json.Unmarshal(b, &top); err == nil && len(top.Defaults) > 0 && string(top.Defaults) != "null" {
		var s Settings
		if d.defaultsExtra, err = splitKnown(top.Defaults, &s, settingsNames...); err != nil {
			return fmt.Errorf("defaults: %w", err)
		}
	}
	return nil
}

// MarshalJSON writes unknown fields back.
func (d Document) MarshalJSON() ([]byte, error) {
	defaults, err := mergeKnown(d.Defaults, d.defaultsExtra)
	if err != nil {
		return nil, err
	}
	agents := d.Agents
	if agents == nil {
		agents = map[string]*Agent{}
	}
	return mergeKnown(struct {
		Version  int               `json:"version"`
		Defaults json.RawMessage   `json:"defaults"`
		Agents   map[string]*Agent `json:"agents"`
	}{d.Version, defaults, agents}, d.extra)
}

// Parse decodes and validates a document. Missing entry ids are assigned.
func Parse(b []byte) (*Document, error) {
	if len(b) > MaxBytes {
		return nil, invalid("document larger than %d bytes", MaxBytes)
	}
	var d Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, invalid("%v", restjson.JSONError(b, err))
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Validate checks the document, naming the bad field.
func (d *Document) Validate() error {
	if d.Version != 1 {
		return invalid("version: want 1, got %d", d.Version)
	}
	if err := validSettings("defaults", d.Defaults); err != nil {
		return err
	}
	if d.Agents == nil {
		d.Agents = map[string]*Agent{}
	}
	for name, a := range d.Agents {
		if err := validAgentName(name); err != nil {
			return err
		}
		if a == nil {
			return invalid("agents.%s: want an object", name)
		}
		field := "agents." + name
		if err := validSettings(field, a.Settings); err != nil {
			return err
		}
		if err := validEntries(field+".allowlist", a.Allowlist); err != nil {
			return err
		}
	}
	return nil
}

// validEntries checks a list of entries, assigning missing ids.
func validEntries(field string, entries []Entry) error {
	ids := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := policy.ValidatePattern(e.Pattern); err != nil {
			return invalid("%s.pattern %q: %v", f, e.Pattern, err)
		}
		if err := policy.ValidateArgPattern(e.ArgPattern); err != nil {
			return invalid("%s.argPattern: %v", f, err)
		}
		if e.ID == "" {
			e.ID = NewID()
		}
		if ids[e.ID] {
			return invalid("%s.id %q: duplicate", f, e.ID)
		}
		ids[e.ID] = true
		if e.LastUsedAt < 0 {
			return invalid("%s.lastUsedAt: must not be negative", f)
		}
	}
	return nil
}

func validAgentName(n string) error {
	if n == "" || len(n) > 128 || strings.ContainsAny(n, "/\x00") {
		return invalid("agents: name %q must be 1-128 characters without / or NUL", n)
	}
	return nil
}

func validSettings(field string, s Settings) error {
	if err := validEntries(field+".denylist", s.Denylist); err != nil {
		return err
	}
	if _, err := policy.ParseSecurity(s.Security); err != nil {
		return invalid("%s.security: %v", field, err)
	}
	if _, err := policy.ParseAsk(s.Ask); err != nil {
		return invalid("%s.ask: %v", field, err)
	}
	if _, err := policy.ParseSecurity(s.AskFallback); err != nil {
		return invalid("%s.askFallback: %v", field, err)
	}
	return nil
}

// Marshal encodes the document with two-space indentation, as OpenClaw
// writes it.
func (d *Document) Marshal() ([]byte, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// PolicySettings returns the policy settings of agent, its own over the
// defaults, and whether it auto-allows skills.
func (d *Document) PolicySettings(agent string) (policy.Settings, bool) {
	conv := func(s Settings) policy.Settings {
		sec, _ := policy.ParseSecurity(s.Security)
		ask, _ := policy.ParseAsk(s.Ask)
		fb, _ := policy.ParseSecurity(s.AskFallback)
		return policy.Settings{Security: sec, Ask: ask, AskFallback: fb}
	}
	out := conv(d.Defaults)
	skills := d.Defaults.AutoAllowSkills != nil && *d.Defaults.AutoAllowSkills
	if a, ok := d.Agents[agent]; ok && a != nil {
		out = agentOver(out, conv(a.Settings))
		if a.AutoAllowSkills != nil {
			skills = *a.AutoAllowSkills
		}
	}
	return out, skills
}

// agentOver layers an agent's settings over the document's defaults: the
// agent's own value wins where set, looser or not. This is the document's
// own shape (as in OpenClaw's exec-approvals.json), not a stricter-wins
// rule: the stricter rules apply between the document and the gateway
// (execpolicy.Effective).
func agentOver(defaults, agent policy.Settings) policy.Settings {
	out := defaults
	if agent.Security != policy.SecurityUnset {
		out.Security = agent.Security
	}
	if agent.Ask != policy.AskUnset {
		out.Ask = agent.Ask
	}
	if agent.AskFallback != policy.SecurityUnset {
		out.AskFallback = agent.AskFallback
	}
	return out
}

// Allowlist returns agent's patterns for the policy engine.
func (d *Document) Allowlist(agent string) []policy.Entry {
	a, ok := d.Agents[agent]
	if !ok || a == nil {
		return nil
	}
	return policyEntries(a.Allowlist)
}

// Denylist returns the deny rules that hold for agent: the defaults' and
// its own.
func (d *Document) Denylist(agent string) []policy.Entry {
	out := policyEntries(d.Defaults.Denylist)
	if a, ok := d.Agents[agent]; ok && a != nil {
		out = append(out, policyEntries(a.Denylist)...)
	}
	return out
}

func policyEntries(entries []Entry) []policy.Entry {
	out := make([]policy.Entry, len(entries))
	for i, e := range entries {
		out[i] = policy.Entry{ID: e.ID, Pattern: e.Pattern, ArgPattern: e.ArgPattern}
	}
	return out
}

// agent returns agent's entry, creating it.
func (d *Document) agent(name string) *Agent {
	if d.Agents == nil {
		d.Agents = map[string]*Agent{}
	}
	a, ok := d.Agents[name]
	if !ok || a == nil {
		a = &Agent{}
		d.Agents[name] = a
	}
	return a
}

// AddPattern adds pattern to agent's allowlist, returning the entry; an
// existing identical pattern is returned as is.
func (d *Document) AddPattern(agent, pattern string) (Entry, error) {
	if err := validAgentName(agent); err != nil {
		return Entry{}, err
	}
	if err := policy.ValidatePattern(pattern); err != nil {
		return Entry{}, err
	}
	a := d.agent(agent)
	for _, e := range a.Allowlist {
		if e.Pattern == pattern {
			return e, nil
		}
	}
	e := Entry{ID: NewID(), Pattern: pattern}
	a.Allowlist = append(a.Allowlist, e)
	return e, nil
}

// AddEgress remembers that agent's sandboxes may always connect to host
// (a normalised name or IP literal).
func (d *Document) AddEgress(agent, host string) error {
	if err := validAgentName(agent); err != nil {
		return err
	}
	a := d.agent(agent)
	if !slices.Contains(a.Egress, host) {
		a.Egress = append(a.Egress, host)
	}
	return nil
}

// EgressAllowed reports whether a human allowed agent's sandboxes host
// always.
func (d *Document) EgressAllowed(agent, host string) bool {
	a, ok := d.Agents[agent]
	return ok && a != nil && slices.Contains(a.Egress, host)
}

// RemoveEntry removes the entry with the id (or pattern) from agent's
// allowlist and reports whether there was one.
func (d *Document) RemoveEntry(agent, idOrPattern string) bool {
	a, ok := d.Agents[agent]
	if !ok || a == nil {
		return false
	}
	n := len(a.Allowlist)
	a.Allowlist = slices.DeleteFunc(a.Allowlist, func(e Entry) bool {
		return e.ID == idOrPattern || e.Pattern == idOrPattern
	})
	return len(a.Allowlist) != n
}

// Use is one allowlist match to record.
type Use struct {
	EntryID, Command, ResolvedPath string
}

// RecordUse updates lastUsedAt, lastUsedCommand and lastResolvedPath of the
// entries used at atMillis; it reports whether anything changed.
func (d *Document) RecordUse(agent string, atMillis int64, uses []Use) bool {
	a, ok := d.Agents[agent]
	if !ok || a == nil {
		return false
	}
	changed := false
	for _, u := range uses {
		for i := range a.Allowlist {
			e := &a.Allowlist[i]
			if e.ID == u.EntryID {
				e.LastUsedAt, e.LastUsedCommand, e.LastResolvedPath = atMillis, u.Command, u.ResolvedPath
				changed = true
			}
		}
	}
	return changed
}

// NewID returns a random UUID in OpenClaw's upper-case spelling.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return strings.ToUpper(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}
