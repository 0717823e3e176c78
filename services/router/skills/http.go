package skills

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/frontend"
)

// ErrorWriter writes an error in an API's envelope.
type ErrorWriter func(w http.ResponseWriter, err error)

// shape is how one API's SDK reads skills: OpenAI's (/v1/skills of the
// openai package) or Anthropic's (client.beta.skills).
type shape struct {
	anthropic bool
	writeErr  ErrorWriter
}

// Handler serves /v1/skills in OpenAI's shapes and in Anthropic's: the
// paths are the same, the bodies differ.
type Handler struct {
	store *Store
	log   *slog.Logger
	// OpenAI and Anthropic serve the two shapes; the router sends a
	// request with Anthropic's version header to the second.
	OpenAI, Anthropic http.Handler
}

// NewHandler returns the handler of /v1/skills, writing errors with each
// API's writer.
func NewHandler(s *Store, log *slog.Logger, openAIErrors, anthropicErrors ErrorWriter) *Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{store: s, log: log}
	h.OpenAI = h.mux(shape{writeErr: openAIErrors})
	h.Anthropic = h.mux(shape{anthropic: true, writeErr: anthropicErrors})
	return h
}

func (h *Handler) mux(sh shape) http.Handler {
	m := http.NewServeMux()
	handle := func(pattern string, fn func(sh shape, w http.ResponseWriter, r *http.Request, account string) error) {
		m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			account, err := tenant.Account(r.Context())
			if err == nil {
				err = fn(sh, w, r, account)
			}
			if err != nil {
				if errs.Public(err).Hidden {
					h.log.ErrorContext(r.Context(), "skills request failed", "path", r.URL.Path, "error", err)
				}
				sh.writeErr(w, err)
			}
		})
	}
	handle("POST /v1/skills", h.create)
	handle("GET /v1/skills", h.list)
	handle("GET /v1/skills/{skill}", h.get)
	handle("POST /v1/skills/{skill}", h.update)
	handle("DELETE /v1/skills/{skill}", h.delete)
	handle("GET /v1/skills/{skill}/content", h.content)
	handle("POST /v1/skills/{skill}/versions", h.createVersion)
	handle("GET /v1/skills/{skill}/versions", h.listVersions)
	handle("GET /v1/skills/{skill}/versions/{version}", h.getVersion)
	handle("DELETE /v1/skills/{skill}/versions/{version}", h.deleteVersion)
	handle("GET /v1/skills/{skill}/versions/{version}/content", h.content)
	handle("/v1/skills/", func(shape, http.ResponseWriter, *http.Request, string) error {
		return errs.New(errs.NotFound, "no such path under /v1/skills")
	})
	return m
}

// maxUploadBody bounds an upload's body: the files' limit and room for
// the multipart framing and the other fields.
const maxUploadBody = contract.MaxSkillBytes + 1<<20

// overflowBody notes whether a body went past its limit.
type overflowBody struct {
	r    io.Reader
	left int64
	over bool
}

func (b *overflowBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.over = true
		return 0, errors.New("body too large")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// readUpload reads a multipart upload of a skill's files.
func readUpload(r *http.Request) (*Form, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, errs.Invalid("files", "upload the files as multipart/form-data")
	}
	body := &overflowBody{r: r.Body, left: maxUploadBody}
	f, err := FromMultipart(multipart.NewReader(body, params["boundary"]))
	if body.over {
		return nil, tooLarge("files", "the request body is at most %d bytes", maxUploadBody)
	}
	return f, err
}

func (h *Handler) create(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	f, err := readUpload(r)
	if err != nil {
		return err
	}
	field := "display_name"
	title, ok := f.Values[field]
	if !ok {
		field = "display_title"
		title = f.Values[field]
	}
	sk, err := h.store.Create(r.Context(), account, title, field, f.Bundle)
	if err != nil {
		return err
	}
	frontend.WriteJSON(w, http.StatusOK, sh.skill(sk))
	return nil
}

func (h *Handler) get(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	sk, err := h.store.Get(r.Context(), account, r.PathValue("skill"), "")
	if err != nil {
		return err
	}
	frontend.WriteJSON(w, http.StatusOK, sh.skill(sk))
	return nil
}

// update sets the default version: OpenAI's skills.update.
func (h *Handler) update(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	var body struct {
		DefaultVersion json.RawMessage `json:"default_version"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return errs.Invalid("default_version", "the body must be a JSON object {\"default_version\": ...}: %v", err)
	}
	v, err := versionOf(body.DefaultVersion)
	if err != nil || v == "" {
		return errs.Invalid("default_version", "must be a version number, as a string or an integer, or \"latest\"")
	}
	sk, err := h.store.SetDefault(r.Context(), account, r.PathValue("skill"), v, "default_version")
	if err != nil {
		return err
	}
	frontend.WriteJSON(w, http.StatusOK, sh.skill(sk))
	return nil
}

// versionOf reads a version given as a string or an integer.
func versionOf(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", err
	}
	return strconv.FormatInt(n, 10), nil
}

func (h *Handler) delete(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	id := r.PathValue("skill")
	if err := h.store.Delete(r.Context(), account, id); err != nil {
		return err
	}
	if sh.anthropic {
		frontend.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "type": "skill_deleted"})
	} else {
		frontend.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "skill.deleted", "deleted": true})
	}
	return nil
}

// content answers a version's files as a zip archive: the default one's
// for /v1/skills/{skill}/content.
func (h *Handler) content(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	_, v, err := h.store.Resolve(r.Context(), account, r.PathValue("skill"), r.PathValue("version"), "")
	if err != nil {
		return err
	}
	z, err := h.store.Archive(r.Context(), v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Disposition", `attachment; filename="`+v.Name+`.zip"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(z)))
	_, _ = w.Write(z)
	return nil
}

func (h *Handler) createVersion(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	f, err := readUpload(r)
	if err != nil {
		return err
	}
	makeDefault := false
	if d, ok := f.Values["default"]; ok {
		if makeDefault, err = strconv.ParseBool(d); err != nil {
			return errs.Invalid("default", "must be true or false")
		}
	}
	sk, v, err := h.store.AddVersion(r.Context(), account, r.PathValue("skill"), f.Bundle, makeDefault)
	if err != nil {
		return err
	}
	frontend.WriteJSON(w, http.StatusOK, sh.version(sk, v))
	return nil
}

func (h *Handler) getVersion(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	sk, v, err := h.store.Resolve(r.Context(), account, r.PathValue("skill"), r.PathValue("version"), "")
	if err != nil {
		return err
	}
	frontend.WriteJSON(w, http.StatusOK, sh.version(sk, v))
	return nil
}

func (h *Handler) deleteVersion(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	id, num := r.PathValue("skill"), r.PathValue("version")
	if _, err := h.store.DeleteVersion(r.Context(), account, id, num); err != nil {
		return err
	}
	if sh.anthropic {
		frontend.WriteJSON(w, http.StatusOK, map[string]any{"id": num, "type": "skill_version_deleted"})
	} else {
		frontend.WriteJSON(w, http.StatusOK, map[string]any{"id": versionID(id, num), "object": "skill.version.deleted", "deleted": true, "version": num})
	}
	return nil
}

func (h *Handler) list(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	list, err := h.store.List(r.Context(), account)
	if err != nil {
		return err
	}
	// Anthropic's lists filter on where a skill comes from: every skill
	// of conch is the account's own.
	if src := r.URL.Query().Get("source"); sh.anthropic && src != "" && src != "custom" {
		list = nil
	}
	items := make([]map[string]any, len(list))
	for i, sk := range list {
		items[i] = sh.skill(sk)
	}
	return sh.page(w, r, items)
}

func (h *Handler) listVersions(sh shape, w http.ResponseWriter, r *http.Request, account string) error {
	sk, err := h.store.Get(r.Context(), account, r.PathValue("skill"), "")
	if err != nil {
		return err
	}
	items := make([]map[string]any, len(sk.Versions))
	for i := range sk.Versions {
		items[i] = sh.version(sk, &sk.Versions[i])
	}
	return sh.page(w, r, items)
}

// Page sizes of the lists, as both APIs have them.
const (
	defaultPageSize = 20
	maxPageSize     = 100
)

// page answers one page of items (oldest first): OpenAI's cursor page
// (after, limit, order; newest first unless order=asc) or Anthropic's
// (page, limit; oldest first).
func (sh shape) page(w http.ResponseWriter, r *http.Request, items []map[string]any) error {
	q := r.URL.Query()
	limit := defaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			return errs.Invalid("limit", "must be an integer from 1 to %d", maxPageSize)
		}
		limit = n
	}
	cursorField := "page"
	if !sh.anthropic {
		cursorField = "after"
		switch q.Get("order") {
		case "", "desc":
			slices.Reverse(items)
		case "asc":
		default:
			return errs.Invalid("order", "must be asc or desc")
		}
	}
	start := 0
	if c := q.Get(cursorField); c != "" {
		i := slices.IndexFunc(items, func(it map[string]any) bool { return it["id"] == c })
		if i < 0 {
			return errs.Invalid(cursorField, "%q is not an item of this list", c)
		}
		start = i + 1
	}
	data := items[start:min(start+limit, len(items))]
	more := start+len(data) < len(items)
	if sh.anthropic {
		var next any
		if more {
			next = data[len(data)-1]["id"]
		}
		frontend.WriteJSON(w, http.StatusOK, map[string]any{"data": data, "has_more": more, "next_page": next})
		return nil
	}
	var first, last any
	if len(data) > 0 {
		first, last = data[0]["id"], data[len(data)-1]["id"]
	}
	frontend.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": more, "first_id": first, "last_id": last})
	return nil
}

// skill is a skill as the API's SDK reads it.
func (sh shape) skill(sk *Skill) map[string]any {
	if sh.anthropic {
		return map[string]any{
			"id": sk.ID, "type": "skill", "display_name": sk.Title, "latest_version_id": sk.LatestVersion,
			"source": map[string]any{"type": "custom"}, "created_at": isoTime(sk.CreatedAt), "updated_at": isoTime(sk.UpdatedAt),
		}
	}
	var desc string
	if d := sk.Default(); d != nil {
		desc = d.Description
	}
	return map[string]any{
		"id": sk.ID, "object": "skill", "name": sk.Name, "description": desc, "created_at": sk.CreatedAt.Unix(),
		"default_version": sk.DefaultVersion, "latest_version": sk.LatestVersion,
	}
}

// version is a skill's version as the API's SDK reads it. Anthropic's
// addresses a version by its id, which is its number; OpenAI's has an id
// of its own besides.
func (sh shape) version(sk *Skill, v *Version) map[string]any {
	if sh.anthropic {
		return map[string]any{"id": v.Version, "type": "skill_version", "skill_id": sk.ID, "name": v.Name,
			"description": v.Description, "created_at": isoTime(v.CreatedAt)}
	}
	return map[string]any{"id": versionID(sk.ID, v.Version), "object": "skill.version", "skill_id": sk.ID, "version": v.Version,
		"name": v.Name, "description": v.Description, "created_at": v.CreatedAt.Unix()}
}

// versionID is OpenAI's id of a version.
func versionID(skill, version string) string {
	return "skillver_" + strings.TrimPrefix(skill, IDPrefix) + "_" + version
}

func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
