package gateways

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/skillfs"
)

var (
	namePattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	toolNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
	domainPattern   = regexp.MustCompile(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$`)
	headerPattern   = regexp.MustCompile(`^[A-Za-z0-9-]{1,128}$`)
)

// ReservedTools never move into the shell and cannot be defined by a gateway.
var ReservedTools = []string{"shell", "read_skill", "exec", "process"}

// BuiltinTools are the built-in server tools.
var BuiltinTools = []string{"request", "open_url", "web_search"}

// invalid returns an InvalidArgument error naming field.
func invalid(field, format string, args ...any) error {
	return errs.New(errs.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// ValidName checks a gateway name.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return invalid("name", "must be 1-64 characters of [a-z0-9._-], starting with a letter or digit")
	}
	return nil
}

// Validate checks a gateway, naming the first bad field. guard, when set,
// judges the URLs whose host is an address now (names are judged when
// dialled); nil checks their form alone.
//
// Numbers are held to their floors and to the operator's ceilings c, as
// the executor holds them when it acts on them.
func Validate(g *routerv1.Gateway, guard *outbound.Guard, c ceiling.Config) error {
	if g == nil {
		return invalid("gateway", "is required")
	}
	if err := ValidName(g.GetName()); err != nil {
		return err
	}
	if err := validateUpstream(g.GetUpstream(), guard); err != nil {
		return err
	}
	if err := validateShell(g.GetShell(), c); err != nil {
		return err
	}
	if err := validateExec(g.GetExec()); err != nil {
		return err
	}
	if err := validateTools(g.GetTools(), guard); err != nil {
		return err
	}
	if err := validateShellTools(g.GetShell().GetTools()); err != nil {
		return err
	}
	if err := validateSkills(g.GetSkills()); err != nil {
		return err
	}
	if n := g.GetMaxIterations(); n < 0 || n > 1000 {
		return invalid("max_iterations", "must be 0 (default 32) to 1000, got %d", n)
	}
	return nil
}

func validateUpstream(u *routerv1.Upstream, guard *outbound.Guard) error {
	if u == nil {
		return invalid("upstream", "is required")
	}
	switch u.GetProvider() {
	case routerv1.Provider_PROVIDER_OPENAI, routerv1.Provider_PROVIDER_ANTHROPIC:
		if strings.TrimSpace(u.GetModel()) == "" {
			return invalid("upstream.model", "is required for provider %s", providerWord(u.GetProvider()))
		}
	case routerv1.Provider_PROVIDER_SCRIPTED:
	default:
		return invalid("upstream.provider", "must be openai, anthropic or scripted")
	}
	if u.GetBaseUrl() != "" {
		if err := validURL(guard, u.GetBaseUrl(), outbound.Base); err != nil {
			return invalid("upstream.base_url", "%v", err)
		}
	}
	if t := u.GetTimeoutSeconds(); t < 0 || t > 3600 {
		return invalid("upstream.timeout_seconds", "must be 0 (default %d) to 3600, got %d", DefaultUpstreamTimeoutSeconds, t)
	}
	if len(u.GetModel()) > 256 || len(u.GetApiKey()) > 4096 {
		return invalid("upstream", "model or api_key too long")
	}
	return nil
}

func providerWord(p routerv1.Provider) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "PROVIDER_"))
}

func validateShell(s *routerv1.ShellSettings, c ceiling.Config) error {
	if s == nil {
		return nil
	}
	if t := s.GetTimeoutSeconds(); t < 0 {
		return invalid("shell.timeout_seconds", "must not be negative (0 means the default, %d), got %d", DefaultShellTimeoutSeconds, t)
	}
	// The model's commands run through the REST command bound (300s).
	if err := ceiling.CheckSeconds("shell.timeout_seconds", int64(s.GetTimeoutSeconds()), min(300*time.Second, c.CommandTimeout)); err != nil {
		return err
	}
	if n := s.GetMaxOutputLength(); n < 0 {
		return invalid("shell.max_output_length", "must not be negative (0 means the default, %d), got %d", DefaultMaxOutputLength, n)
	}
	if err := ceiling.Check("shell.max_output_length", int64(s.GetMaxOutputLength()), 1, min(contract.MaxOutputLength, c.OutputLength)); err != nil {
		return err
	}
	if t := s.GetTemplate(); t != "" && !contract.ValidTemplateName(t) {
		return invalid("shell.template", "%s, got %q", contract.TemplateNameRule, t)
	}
	if n := s.GetSessionIdleSeconds(); n < 0 {
		return invalid("shell.session_idle_seconds", "must not be negative (0 means the default, %d), got %d", DefaultSessionIdleSeconds, n)
	}
	if err := ceiling.CheckSeconds("shell.session_idle_seconds", int64(s.GetSessionIdleSeconds()), c.IdleTimeout); err != nil {
		return err
	}
	if s.GetLimits() != nil {
		if err := ceiling.CheckLimits("shell.limits.", s.GetLimits(), c); err != nil {
			return err
		}
	}
	if err := validateSkillMounts(s.GetSkills()); err != nil {
		return err
	}
	return validateNetwork(s.GetNetwork())
}

var skillVersionPattern = regexp.MustCompile(`^(|latest|[1-9][0-9]{0,8})$`)

// validateSkillMounts checks the uploaded skills a gateway's shell mounts:
// their ids and versions as the skills store writes them, each once, at
// most as many as a sandbox mounts. Whether each exists is known only
// when a sandbox is made (a skill may be deleted after the gateway named
// it); a completion then names the one missing.
func validateSkillMounts(mounts []*routerv1.SkillMount) error {
	if len(mounts) > contract.MaxSandboxSkills {
		return invalid("shell.skills", "at most %d skills, got %d", contract.MaxSandboxSkills, len(mounts))
	}
	seen := map[string]bool{}
	for i, m := range mounts {
		field := fmt.Sprintf("shell.skills[%d]", i)
		switch {
		case !skillfs.ValidID(m.GetSkillId()):
			return invalid(field+".skill_id", "must be a skill's id (skill_ and lowercase letters or digits), got %q", m.GetSkillId())
		case !skillVersionPattern.MatchString(m.GetVersion()):
			return invalid(field+".version", "must be empty (the default version), latest or a version number, got %q", m.GetVersion())
		case seen[m.GetSkillId()]:
			return invalid(field+".skill_id", "%q is named twice", m.GetSkillId())
		}
		seen[m.GetSkillId()] = true
	}
	return nil
}

func validateNetwork(n *executorv1.Network) error {
	switch n.GetMode() {
	case executorv1.NetworkMode_NETWORK_MODE_UNSPECIFIED, executorv1.NetworkMode_NETWORK_MODE_NONE:
		if len(n.GetAllowedDomains()) > 0 || len(n.GetPorts()) > 0 {
			return invalid("shell.network.allowed_domains", "needs mode allowlist")
		}
		if n.GetAsk() == executorv1.NetworkAsk_NETWORK_ASK_ON_MISS {
			return invalid("shell.network.ask", "needs mode allowlist")
		}
	case executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST:
		if len(n.GetAllowedDomains()) == 0 {
			return invalid("shell.network.allowed_domains", "at least one domain is required in allowlist mode")
		}
	default:
		return invalid("shell.network.mode", "must be none or allowlist")
	}
	for i, d := range n.GetAllowedDomains() {
		if _, err := egress.NormalizePattern(d); err != nil {
			return invalid(fmt.Sprintf("shell.network.allowed_domains[%d]", i), "%v", err)
		}
	}
	for i, p := range n.GetPorts() {
		if p < 1 || p > 65535 {
			return invalid(fmt.Sprintf("shell.network.ports[%d]", i), "must be 1 to 65535, got %d", p)
		}
	}
	if c := n.GetMaxConnections(); c < 0 || c > 4096 {
		return invalid("shell.network.max_connections", "must be 0 (the default) to 4096, got %d", c)
	}
	if n.GetMaxBytes() < 0 {
		return invalid("shell.network.max_bytes", "must not be negative (0: the default)")
	}
	if _, ok := executorv1.NetworkAsk_name[int32(n.GetAsk())]; !ok {
		return invalid("shell.network.ask", "must be off or on-miss")
	}
	if t := n.GetApprovalTimeoutSeconds(); t < 0 || t > 3600 {
		return invalid("shell.network.approval_timeout_seconds", "must be 0 (the default) to 3600, got %d", t)
	}
	var allowed []string
	for _, d := range n.GetAllowedDomains() {
		norm, _ := egress.NormalizePattern(d)
		allowed = append(allowed, norm)
	}
	envs := map[string]bool{}
	for i, sec := range n.GetSecrets() {
		f := fmt.Sprintf("shell.network.secrets[%d]", i)
		switch {
		case !secretEnv.MatchString(sec.GetEnv()):
			return invalid(f+".env", "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
		case envs[sec.GetEnv()]:
			return invalid(f+".env", "%q is named twice", sec.GetEnv())
		case len(sec.GetValue()) > 16<<10 || strings.ContainsAny(sec.GetValue(), "\r\n\x00"):
			return invalid(f+".value", "must be at most 16 KiB without line breaks or NUL")
		case len(sec.GetDomains()) == 0:
			return invalid(f+".domains", "at least one domain is required")
		}
		envs[sec.GetEnv()] = true
		for j, d := range sec.GetDomains() {
			norm, err := egress.NormalizePattern(d)
			if err != nil || !egress.Covers(allowed, norm) {
				return invalid(fmt.Sprintf("%s.domains[%d]", f, j), "%q must be within shell.network.allowed_domains", d)
			}
		}
	}
	return nil
}

// requireSecretValues checks, once stored values are kept, that every
// network secret has one.
func requireSecretValues(g *routerv1.Gateway) error {
	for i, sec := range g.GetShell().GetNetwork().GetSecrets() {
		if sec.GetValue() == "" {
			return invalid(fmt.Sprintf("shell.network.secrets[%d].value", i), "is required")
		}
	}
	return nil
}

var secretEnv = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

func validateDomains(field string, domains []string) error {
	for i, d := range domains {
		if !domainPattern.MatchString(d) {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "%q is not a domain name (lowercase, optionally starting with *.)", d)
		}
	}
	return nil
}

func validateExec(e *approvalv1.ExecSettings) error {
	if e == nil {
		return nil
	}
	if _, ok := approvalv1.Host_name[int32(e.GetHost())]; !ok {
		return invalid("exec.host", "must be sandbox, gateway or node")
	}
	if _, ok := approvalv1.Security_name[int32(e.GetSecurity())]; !ok {
		return invalid("exec.security", "must be deny, allowlist or full")
	}
	if _, ok := approvalv1.Ask_name[int32(e.GetAsk())]; !ok {
		return invalid("exec.ask", "must be off, on-miss or always")
	}
	if _, ok := approvalv1.Security_name[int32(e.GetAskFallback())]; !ok {
		return invalid("exec.ask_fallback", "must be deny, allowlist or full")
	}
	if a := e.GetAudit(); a != "" && a != "async" && a != "sync" {
		return invalid("exec.audit", "must be async or sync, got %q", a)
	}
	if t := e.GetPreviewTimeoutSeconds(); t < 0 || t > int32(contract.MaxPreviewTimeout/time.Second) {
		return invalid("exec.preview_timeout_seconds", "must be 0 (the default, %d) to %d, got %d", int(contract.DefaultPreviewTimeout/time.Second), int(contract.MaxPreviewTimeout/time.Second), t)
	}
	for i, b := range e.GetSafeBins() {
		if b == "" || strings.ContainsAny(b, "/ \t\n") {
			return invalid(fmt.Sprintf("exec.safe_bins[%d]", i), "must be a bare program name, got %q", b)
		}
	}
	for i, p := range e.GetPathPrepend() {
		if !strings.HasPrefix(p, "/") || strings.Contains(p, ":") || strings.Contains(p, "..") {
			return invalid(fmt.Sprintf("exec.path_prepend[%d]", i), "must be an absolute directory without ':' or '..', got %q", p)
		}
	}
	if t := e.GetApprovalTimeoutSeconds(); t < 0 || t > 86400 {
		return invalid("exec.approval_timeout_seconds", "must be 0 (default %d) to 86400, got %d", execpolicy.DefaultApprovalTimeoutSeconds, t)
	}
	if t := e.GetApprovalRunningNoticeMs(); t < 0 {
		return invalid("exec.approval_running_notice_ms", "must not be negative, got %d", t)
	}
	if rv := e.GetReviewer(); rv != nil {
		if !namePattern.MatchString(rv.GetGateway()) {
			return invalid("exec.reviewer.gateway", "must name a gateway, got %q", rv.GetGateway())
		}
		for i, m := range rv.GetMay() {
			if m != "allow-once" && m != "deny" {
				return invalid(fmt.Sprintf("exec.reviewer.may[%d]", i), "must be allow-once or deny, got %q", m)
			}
		}
	}
	ids := map[string]bool{}
	for i, r := range e.GetDeny() {
		field := fmt.Sprintf("exec.deny[%d]", i)
		switch {
		case r.GetId() == "" || len(r.GetId()) > 128 || strings.ContainsAny(r.GetId(), "\x00\n\r"):
			return invalid(field+".id", "must be 1-128 characters without control characters")
		case ids[r.GetId()]:
			return invalid(field+".id", "%q is given twice", r.GetId())
		}
		ids[r.GetId()] = true
		if err := policy.ValidatePattern(r.GetPattern()); err != nil {
			return invalid(field+".pattern", "%v", err)
		}
		if err := policy.ValidateArgPattern(r.GetArgPattern()); err != nil {
			return invalid(field+".arg_pattern", "%v", err)
		}
	}
	return nil
}

// validateTools checks the server tools.
func validateTools(t *routerv1.ServerTools, guard *outbound.Guard) error {
	names := map[string]bool{}
	add := func(field, name string) error {
		if !toolNamePattern.MatchString(name) {
			return invalid(field, "must be 1-64 characters of [A-Za-z0-9_-], starting with a letter, got %q", name)
		}
		for _, r := range ReservedTools {
			if name == r {
				return invalid(field, "%q is reserved", name)
			}
		}
		if names[name] {
			return invalid(field, "tool %q is defined twice", name)
		}
		names[name] = true
		return nil
	}
	for i, w := range t.GetWebhooks() {
		f := fmt.Sprintf("tools.webhooks[%d]", i)
		if err := add(f+".name", w.GetName()); err != nil {
			return err
		}
		if err := validURL(guard, w.GetUrl(), outbound.Endpoint); err != nil {
			return invalid(f+".url", "%v", err)
		}
		if err := validSchema(w.GetParametersSchema()); err != nil {
			return invalid(f+".parameters_schema", "%v", err)
		}
		if err := validHeaders(w.GetHeaders()); err != nil {
			return invalid(f+".headers", "%v", err)
		}
	}
	for i, m := range t.GetMcpServers() {
		f := fmt.Sprintf("tools.mcp_servers[%d]", i)
		if !toolNamePattern.MatchString(m.GetName()) {
			return invalid(f+".name", "must be 1-64 characters of [A-Za-z0-9_-], starting with a letter")
		}
		if err := validURL(guard, m.GetUrl(), outbound.Endpoint); err != nil {
			return invalid(f+".url", "%v", err)
		}
		if err := validHeaders(m.GetHeaders()); err != nil {
			return invalid(f+".headers", "%v", err)
		}
	}
	b := t.GetBuiltins()
	for name, on := range map[string]bool{"request": b.GetRequest(), "open_url": b.GetOpenUrl(), "web_search": b.GetWebSearch()} {
		if on {
			if err := add("tools.builtins."+name, name); err != nil {
				return err
			}
		}
	}
	if b.GetWebSearch() {
		if err := validURL(guard, b.GetWebSearchUrl(), outbound.Endpoint); err != nil {
			return invalid("tools.builtins.web_search_url", "%v", err)
		}
	}
	if err := validateDomains("tools.builtins.allowed_domains", b.GetAllowedDomains()); err != nil {
		return err
	}
	return nil
}

// validateShellTools checks the tools moved into the shell. Names need not
// match a statically defined tool: MCP tools are only known at run time.
func validateShellTools(st *routerv1.ShellTools) error {
	if _, ok := routerv1.ToolsMode_name[int32(st.GetMode())]; !ok {
		return invalid("shell.tools.mode", "must be whitelist or blacklist")
	}
	if st.GetMode() == routerv1.ToolsMode_TOOLS_MODE_UNSPECIFIED && len(st.GetNames()) > 0 {
		return invalid("shell.tools.mode", "is required when names are given")
	}
	for i, n := range st.GetNames() {
		for _, r := range ReservedTools {
			if n == r {
				return invalid(fmt.Sprintf("shell.tools.names[%d]", i), "%q is reserved and never moves into the shell", n)
			}
		}
		if !toolNamePattern.MatchString(n) {
			return invalid(fmt.Sprintf("shell.tools.names[%d]", i), "%q is not a tool name", n)
		}
	}
	return nil
}

func validateSkills(skills []*routerv1.Skill) error {
	seen := map[string]bool{}
	for i, s := range skills {
		f := fmt.Sprintf("skills[%d]", i)
		if !toolNamePattern.MatchString(s.GetName()) {
			return invalid(f+".name", "must be 1-64 characters of [A-Za-z0-9_-], starting with a letter")
		}
		if seen[s.GetName()] {
			return invalid(f+".name", "skill %q is defined twice", s.GetName())
		}
		seen[s.GetName()] = true
		if len(s.GetContent()) > 256<<10 {
			return invalid(f+".content", "must be at most 256 KiB")
		}
	}
	return nil
}

// validURL checks a URL conch will call for the tenant (package outbound
// owns the rule).
func validURL(guard *outbound.Guard, s string, kind outbound.URLKind) error {
	_, err := guard.ParseURL(s, kind)
	return err
}

func validHeaders(h map[string]string) error {
	for k, v := range h {
		if !headerPattern.MatchString(k) {
			return fmt.Errorf("%q is not a header name", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("value of %s contains a line break or NUL", k)
		}
	}
	return nil
}

// validSchema checks that s is a JSON Schema object describing an object.
func validSchema(s string) error {
	if s == "" {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return fmt.Errorf("must be a JSON object")
	}
	if t, ok := obj["type"]; ok && t != "object" {
		return fmt.Errorf(`"type" must be "object"`)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		return err
	}
	if _, err := c.Compile("schema.json"); err != nil {
		return fmt.Errorf("invalid JSON Schema: %v", err)
	}
	return nil
}
