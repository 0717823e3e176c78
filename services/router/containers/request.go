package containers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/openai"
)

// Limits of the API.
const (
	// MaxFileBytes is the largest file upload, as the workspace file
	// API's (docs/how-to/workspace-files.md).
	MaxFileBytes = contract.MaxFileBytes
	// DefaultIdleMinutes is how long a container lives without activity
	// when expires_after is not given: OpenAI's 20 minutes.
	DefaultIdleMinutes = 20
	// MaxIdleMinutes bounds expires_after.minutes: a day.
	MaxIdleMinutes = 24 * 60
	// MaxNameChars bounds a container's name (the executor's bound).
	MaxNameChars = 256
	// WorkspaceDir is where a container's files are.
	WorkspaceDir = contract.WorkspaceDir
	maxJSONBody  = 1 << 20
)

// memoryLimits are OpenAI's memory_limit values, in bytes of the
// sandbox's memory limit.
var memoryLimits = map[string]int64{"1g": 1 << 30, "4g": 4 << 30, "16g": 16 << 30, "64g": 64 << 30}

// fieldError is a request the client must fix, naming the field.
type fieldError struct {
	status int    // 0: 400
	code   string // "": invalid_request
	param  string
	msg    string
}

func (e *fieldError) Error() string {
	if e.param == "" {
		return e.msg
	}
	return e.param + ": " + e.msg
}

func badField(param, format string, args ...any) *fieldError {
	return &fieldError{param: param, msg: fmt.Sprintf(format, args...)}
}

// createParams is a parsed POST /v1/containers.
type createParams struct {
	Name        string
	IdleMinutes int64
	MemoryLimit string
	User        string
	// Skills are mounted in the container (package skills).
	Skills []completion.SkillRef
	// Template is conch's extension: a template of the account the
	// container starts from.
	Template string
}

// object decodes a JSON object into its fields, refusing any but known;
// null fields are left out, as OpenAI treats them as absent. prefix is
// the param path of the object ("" for the body).
func object(raw []byte, prefix string, known ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		if prefix == "" {
			return nil, badField("", "the request body must be a JSON object")
		}
		return nil, badField(strings.TrimSuffix(prefix, "."), "must be an object")
	}
	for k, v := range m {
		if !slices.Contains(known, k) {
			return nil, badField(prefix+k, "unrecognized request argument")
		}
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			delete(m, k)
		}
	}
	return m, nil
}

func stringField(m map[string]json.RawMessage, param, key string) (string, bool, error) {
	v, ok := m[key]
	if !ok {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", false, badField(param, "must be a string")
	}
	return s, true, nil
}

func integerField(m map[string]json.RawMessage, param, key string) (int64, bool, error) {
	v, ok := m[key]
	if !ok {
		return 0, false, nil
	}
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var val any
	if err := d.Decode(&val); err != nil {
		return 0, false, badField(param, "must be an integer")
	}
	n, isNumber := val.(json.Number)
	i, err := n.Int64()
	if !isNumber || err != nil {
		return 0, false, badField(param, "must be an integer")
	}
	return i, true, nil
}

// parseCreate parses the body of POST /v1/containers.
func parseCreate(body []byte) (createParams, error) {
	p := createParams{IdleMinutes: DefaultIdleMinutes, MemoryLimit: "1g"}
	m, err := object(body, "", "name", "expires_after", "file_ids", "memory_limit", "network_policy", "skills", "user", "template")
	if err != nil {
		return p, err
	}
	name, ok, err := stringField(m, "name", "name")
	switch {
	case err != nil:
		return p, err
	case !ok:
		return p, badField("name", "required")
	case utf8.RuneCountInString(name) > MaxNameChars:
		return p, badField("name", "must be at most %d characters", MaxNameChars)
	}
	p.Name = name
	if raw, ok := m["expires_after"]; ok {
		ea, err := object(raw, "expires_after.", "anchor", "minutes")
		if err != nil {
			return p, err
		}
		anchor, ok, err := stringField(ea, "expires_after.anchor", "anchor")
		switch {
		case err != nil:
			return p, err
		case !ok:
			return p, badField("expires_after.anchor", "required")
		case anchor != "last_active_at":
			return p, badField("expires_after.anchor", "must be last_active_at")
		}
		minutes, ok, err := integerField(ea, "expires_after.minutes", "minutes")
		switch {
		case err != nil:
			return p, err
		case !ok:
			return p, badField("expires_after.minutes", "required")
		case minutes < 1 || minutes > MaxIdleMinutes:
			return p, badField("expires_after.minutes", "must be between 1 and %d", MaxIdleMinutes)
		}
		p.IdleMinutes = minutes
	}
	if raw, ok := m["file_ids"]; ok {
		var ids []string
		if err := json.Unmarshal(raw, &ids); err != nil {
			return p, badField("file_ids", "must be an array of strings")
		}
		if len(ids) > 0 {
			return p, badField("file_ids", "conch has no Files API to copy files from; upload each file with POST /v1/containers/{container_id}/files")
		}
	}
	if ml, ok, err := stringField(m, "memory_limit", "memory_limit"); err != nil {
		return p, err
	} else if ok {
		if _, known := memoryLimits[ml]; !known {
			return p, badField("memory_limit", "must be one of 1g, 4g, 16g, 64g")
		}
		p.MemoryLimit = ml
	}
	if raw, ok := m["network_policy"]; ok {
		np, err := object(raw, "network_policy.", "type", "allowed_domains", "domain_secrets")
		if err != nil {
			return p, err
		}
		typ, _, err := stringField(np, "network_policy.type", "type")
		switch {
		case err != nil:
			return p, err
		case typ == "allowlist":
			return p, badField("network_policy.type", "allowlist is not supported: conch containers have no network access; use disabled")
		case typ != "disabled":
			return p, badField("network_policy.type", "must be disabled")
		}
	}
	if p.Skills, err = openai.ParseSkillReferences("skills", m["skills"]); err != nil {
		var fe *completion.FieldError
		if errors.As(err, &fe) {
			return p, badField(fe.Field, "%s", fe.Msg)
		}
		return p, err
	}
	if user, ok, err := stringField(m, "user", "user"); err != nil {
		return p, err
	} else if ok {
		if !tenant.ValidUserID(user) {
			return p, badField("user", "must be "+tenant.UserIDRule)
		}
		p.User = user
	}
	if tpl, ok, err := stringField(m, "template", "template"); err != nil {
		return p, err
	} else if ok {
		if !contract.ValidTemplateName(tpl) {
			return p, badField("template", "must be "+contract.TemplateNameRule)
		}
		p.Template = tpl
	}
	return p, nil
}

// listParams is a parsed list query.
type listParams struct {
	After string
	Limit int
	Desc  bool
	Name  string
}

// parseList parses the query of a list; name is a filter only containers
// have.
func parseList(q url.Values, withName bool) (listParams, error) {
	p := listParams{Limit: 20, Desc: true}
	for k, v := range q {
		if len(v) != 1 {
			return p, badField(k, "must be given once")
		}
		switch val := v[0]; {
		case k == "after":
			p.After = val
		case k == "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > 100 {
				return p, badField("limit", "must be an integer between 1 and 100")
			}
			p.Limit = n
		case k == "order":
			if val != "asc" && val != "desc" {
				return p, badField("order", "must be asc or desc")
			}
			p.Desc = val == "desc"
		case k == "name" && withName:
			p.Name = val
		default:
			return p, badField(k, "unrecognized query parameter")
		}
	}
	return p, nil
}

// page returns the items that follow the one named p.After (all when
// empty) in the order p asks, items being in ascending order, at most
// p.Limit of them, and whether more follow.
func page[T any](items []T, id func(T) string, p listParams) ([]T, bool, error) {
	if p.Desc {
		items = slices.Clone(items)
		slices.Reverse(items)
	}
	if p.After != "" {
		i := slices.IndexFunc(items, func(t T) bool { return id(t) == p.After })
		if i < 0 {
			return nil, false, badField("after", "no object with id %q in this list", p.After)
		}
		items = items[i+1:]
	}
	if len(items) > p.Limit {
		return items[:p.Limit], true, nil
	}
	return items, false, nil
}

// fileIDPrefix starts the id of a container file, whose rest is its path
// beneath the workspace, base64url-encoded.
const fileIDPrefix = "cfile_"

// fileID is the id of the file at the sandbox path p.
func fileID(p string) string {
	return fileIDPrefix + base64.RawURLEncoding.EncodeToString([]byte(strings.TrimPrefix(p, WorkspaceDir+"/")))
}

// filePath is the sandbox path of the file id, false when id is none.
func filePath(id string) (string, bool) {
	enc, ok := strings.CutPrefix(id, fileIDPrefix)
	if !ok || enc == "" {
		return "", false
	}
	rel, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(rel) == 0 || !utf8.Valid(rel) || bytes.IndexByte(rel, 0) >= 0 {
		return "", false
	}
	return WorkspaceDir + "/" + string(rel), true
}

// uploadPath is where an upload named filename goes: the workspace's top
// directory. A name that is not one plain file name is refused, never
// rewritten.
func uploadPath(filename string) (string, error) {
	switch {
	case filename == "":
		return "", badField("file", "the upload has no file name")
	case filename == "." || filename == ".." || strings.ContainsAny(filename, "/\\\x00"):
		return "", badField("file", "file name %q must be a plain name, without / or \\, and not . or ..", filename)
	case len(filename) > 255 || !utf8.ValidString(filename):
		return "", badField("file", "file name must be valid UTF-8 of at most 255 bytes")
	}
	return WorkspaceDir + "/" + filename, nil
}

// partFileName is the filename of a multipart part as its client sent it.
// (multipart.Part.FileName strips the directories, which would turn
// "../x" into "x" where it must be refused.)
func partFileName(h http.Header) string {
	_, params, err := mime.ParseMediaType(h.Get("Content-Disposition"))
	if err != nil {
		return ""
	}
	return params["filename"]
}
