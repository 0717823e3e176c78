package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/display"
)

const auditUsage = `usage: conch audit [list] [flags]
       conch audit verify [flags]

Commands:
  list [flags]     show the newest records (--limit), oldest first, as a
                   log reads; --follow prints newer ones below. The
                   command run when none is named
  verify [flags]   check the hash chains of the stored records and name the
                   first removed, reordered or edited one
`

var auditGroup = &group{
	name:     "audit",
	summary:  "show the audit trail (who ran what, who allowed it), verify its hash chains",
	usage:    auditUsage,
	fallback: "list",
	flags:    func(cmd string) *flag.FlagSet { return new(auditFlags).flagSet(cmd) },
}

// auditFlags are the values of the flags of an audit command.
type auditFlags struct {
	Options
	since, until, gateway, user, decision, q, account string
	limit                                             int
	follow                                            bool
}

// flagSet is the flag set of audit command cmd, bound to f: what the
// command parses and what its help lists.
func (f *auditFlags) flagSet(cmd string) *flag.FlagSet {
	fs := f.newFlagSet("conch audit")
	switch cmd {
	case "list":
		fs.StringVar(&f.since, "since", "", "oldest record: a duration back from now (30m, 12h, 7d) or an RFC 3339 `TIME`")
		fs.StringVar(&f.until, "until", "", "newest record: a `TIME` as --since takes")
		fs.StringVar(&f.gateway, "gateway", "", "only the records of the gateway `NAME`")
		fs.StringVar(&f.user, "user", "", "only the records of the user `ID`")
		fs.StringVar(&f.decision, "decision", "", "only the records of `DECISION`: allow, ask, deny, allow-once, allow-always, …")
		fs.StringVar(&f.q, "q", "", "only the records that match `TEXT`: a substring of the command or reason, an approval id, who answered")
		fs.IntVar(&f.limit, "limit", 50, "show the `N` newest records, 1 to 1000")
		fs.BoolVar(&f.follow, "follow", false, "keep printing new records as they come")
		fs.StringVar(&f.account, "account", "", "admin key: only the records of the account `ID`")
	case "verify":
		fs.StringVar(&f.account, "account", "", "admin key: verify only the records of the account `ID`")
	}
	return fs
}

// apiAuditRecord is an audit record as the REST API returns it.
type apiAuditRecord struct {
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Event      string    `json:"event,omitempty"`
	Account    string    `json:"account"`
	User       string    `json:"user,omitempty"`
	Session    string    `json:"session,omitempty"`
	Gateway    string    `json:"gateway,omitempty"`
	Host       string    `json:"host,omitempty"`
	Sandbox    string    `json:"sandbox,omitempty"`
	Command    string    `json:"command,omitempty"`
	Decision   string    `json:"decision,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	ApprovalID string    `json:"approval_id,omitempty"`
	ResolvedBy string    `json:"resolved_by,omitempty"`
	Surface    string    `json:"surface,omitempty"`
	Outcome    *struct {
		ExitCode   int    `json:"exit_code"`
		TimedOut   bool   `json:"timed_out,omitempty"`
		Error      string `json:"error,omitempty"`
		DurationMs int64  `json:"duration_ms"`
	} `json:"outcome,omitempty"`
	TraceID string `json:"trace_id,omitempty"`
	Writer  string `json:"writer"`
	Seq     int64  `json:"seq"`
	Hash    string `json:"hash"`
}

// Audit runs `conch audit …`.
func Audit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f auditFlags
	cmd, _, err := auditGroup.parse(stdout, args, f.flagSet)
	if err != nil {
		return err
	}
	o := &f.Options
	c, err := NewClient(o)
	if err != nil {
		return err
	}
	if cmd == "verify" {
		return verifyAudit(ctx, c, o, f.account, stdout)
	}
	query := url.Values{}
	now := time.Now()
	for name, v := range map[string]string{"since": f.since, "until": f.until} {
		if v == "" {
			continue
		}
		t, err := ParseSince(v, now)
		if err != nil {
			return Usagef("--%s: %v", name, err)
		}
		query.Set(name, t.UTC().Format(time.RFC3339Nano))
	}
	for name, v := range map[string]string{"gateway": f.gateway, "user": f.user, "decision": f.decision, "q": f.q, "account": f.account} {
		if v != "" {
			query.Set(name, v)
		}
	}
	if f.limit < 1 || f.limit > 1000 {
		return Usagef("--limit: between 1 and 1000")
	}
	query.Set("page_size", strconv.Itoa(f.limit))
	var page struct {
		Records []apiAuditRecord `json:"records"`
	}
	if err := c.JSON(ctx, "GET", "/api/v1/audit?"+query.Encode(), nil, &page); err != nil {
		return err
	}
	// Oldest first on a terminal, so that --follow continues downwards.
	recs := page.Records
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	if err := printAudit(stdout, o, recs, true, f.follow); err != nil || !f.follow {
		return err
	}
	seen := map[string]bool{}
	last := now.Add(-time.Minute)
	for _, r := range recs {
		seen[r.Writer+"/"+strconv.FormatInt(r.Seq, 10)] = true
		if r.Time.After(last) {
			last = r.Time
		}
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// Records arrive up to a flush interval late, out of order across
		// writers: look back a little and drop what was shown.
		query.Set("since", last.Add(-10*time.Second).UTC().Format(time.RFC3339Nano))
		query.Set("page_size", "1000")
		if err := c.JSON(ctx, "GET", "/api/v1/audit?"+query.Encode(), nil, &page); err != nil {
			return err
		}
		var fresh []apiAuditRecord
		for i := len(page.Records) - 1; i >= 0; i-- {
			r := page.Records[i]
			if k := r.Writer + "/" + strconv.FormatInt(r.Seq, 10); !seen[k] {
				seen[k] = true
				fresh = append(fresh, r)
				if r.Time.After(last) {
					last = r.Time
				}
			}
		}
		if err := printAudit(stdout, o, fresh, false, true); err != nil {
			return err
		}
	}
}

// auditColumns are the table's columns, with the widths --follow keeps
// (a table printed once is as wide as its widest cell; rows printed over
// time must line up with the header printed first).
var auditColumns = []struct {
	name  string
	width int
}{{"TIME", 19}, {"KIND", 16}, {"GATEWAY", 14}, {"USER", 14}, {"DECISION", 12}, {"BY", 20}, {"COMMAND", 40}, {"DETAIL", 0}}

func printAudit(w io.Writer, o *Options, recs []apiAuditRecord, header, fixed bool) error {
	if o.JSON() {
		for _, r := range recs {
			if err := PrintJSON(w, r); err != nil {
				return err
			}
		}
		return nil
	}
	rows := make([][]string, 0, len(recs)+1)
	if header {
		var h []string
		for _, c := range auditColumns {
			h = append(h, c.name)
		}
		rows = append(rows, h)
	}
	for _, r := range recs {
		kind, detail := r.Kind, r.Reason
		if r.Event != "" {
			kind += " " + r.Event
		}
		if o := r.Outcome; o != nil {
			detail = fmt.Sprintf("exit %d in %dms", o.ExitCode, o.DurationMs)
			if o.TimedOut {
				detail = "timed out"
			}
			if o.Error != "" {
				detail = o.Error
			}
		}
		by := r.ResolvedBy
		if r.Surface != "" {
			by += " (" + r.Surface + ")"
		}
		rows = append(rows, []string{FormatTime(r.Time), kind, dash(r.Gateway), dash(r.User), dash(r.Decision),
			dash(display.Escape(by)), display.Escape(abbrev(r.Command, 60)), dash(display.Escape(abbrev(detail, 60)))})
	}
	if fixed {
		for _, row := range rows {
			var b strings.Builder
			for i, cell := range row {
				width := auditColumns[i].width
				if width == 0 {
					b.WriteString(cell)
					continue
				}
				if utf8.RuneCountInString(cell) > width {
					cell = abbrev(cell, width-1)
				}
				b.WriteString(cell + strings.Repeat(" ", max(1, width+2-utf8.RuneCountInString(cell))))
			}
			if _, err := fmt.Fprintln(w, strings.TrimRight(b.String(), " ")); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func verifyAudit(ctx context.Context, c *Client, o *Options, account string, stdout io.Writer) error {
	path := "/api/v1/audit:verify"
	if account != "" {
		path += "?account=" + url.QueryEscape(account)
	}
	var out struct {
		OK      bool `json:"ok"`
		Reports []struct {
			Account  string `json:"account"`
			Segments int    `json:"segments"`
			Records  int    `json:"records"`
			Problem  *struct {
				Segment string `json:"segment"`
				Line    int    `json:"line"`
				Seq     int64  `json:"seq"`
				Reason  string `json:"reason"`
			} `json:"problem,omitempty"`
		} `json:"reports"`
	}
	if err := c.JSON(ctx, "GET", path, nil, &out); err != nil {
		return err
	}
	if o.JSON() {
		if err := PrintJSON(stdout, out); err != nil {
			return err
		}
	} else {
		for _, r := range out.Reports {
			if p := r.Problem; p != nil {
				fmt.Fprintf(stdout, "%s: BAD: first bad record: %s line %d (seq %d): %s\n", display.Escape(r.Account), display.Escape(p.Segment), p.Line, p.Seq, display.Escape(p.Reason))
				continue
			}
			fmt.Fprintf(stdout, "%s: ok, %d records in %d segments\n", display.Escape(r.Account), r.Records, r.Segments)
		}
	}
	if !out.OK {
		return fmt.Errorf("the audit trail does not verify")
	}
	return nil
}

// ParseSince reads a time: a duration back from now ("30m", "7d") or RFC
// 3339.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration such as 7d or 12h, or an RFC 3339 time")
	}
	return t, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func abbrev(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
