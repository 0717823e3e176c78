package containers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/openai"
)

// Handler serves /v1/containers. Requests must carry the caller's tenant
// scope (the router's auth middleware sets it).
type Handler struct {
	exec executorv1.ExecutorServiceClient
	// skills finds the skills a create names; nil refuses them.
	skills completion.SkillSource
	log    *slog.Logger
	mux    *http.ServeMux
}

// NewHandler returns the Containers API over the executor service, with
// skills from skills (nil: none).
func NewHandler(exec executorv1.ExecutorServiceClient, skills completion.SkillSource, log *slog.Logger) (*Handler, error) {
	if exec == nil {
		return nil, errors.New("containers: an executor client is required")
	}
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{exec: exec, skills: skills, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /v1/containers", h.create)
	h.mux.HandleFunc("GET /v1/containers", h.list)
	h.mux.HandleFunc("GET /v1/containers/{container_id}", h.retrieve)
	h.mux.HandleFunc("DELETE /v1/containers/{container_id}", h.delete)
	h.mux.HandleFunc("POST /v1/containers/{container_id}/files", h.createFile)
	h.mux.HandleFunc("GET /v1/containers/{container_id}/files", h.listFiles)
	h.mux.HandleFunc("GET /v1/containers/{container_id}/files/{file_id}", h.retrieveFile)
	h.mux.HandleFunc("DELETE /v1/containers/{container_id}/files/{file_id}", h.deleteFile)
	h.mux.HandleFunc("GET /v1/containers/{container_id}/files/{file_id}/content", h.fileContent)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, http.StatusNotFound, "invalid_request_error", "not_found", "", "unknown path "+r.Method+" "+r.URL.Path)
	})
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// container is OpenAI's container object.
type container struct {
	ID            string        `json:"id"`
	Object        string        `json:"object"`
	CreatedAt     int64         `json:"created_at"`
	Status        string        `json:"status"`
	Name          string        `json:"name"`
	ExpiresAfter  *expiresAfter `json:"expires_after,omitempty"`
	LastActiveAt  int64         `json:"last_active_at"`
	MemoryLimit   string        `json:"memory_limit,omitempty"`
	NetworkPolicy networkPolicy `json:"network_policy"`
	// User is conch's: the user whose persistent workspace it mounts.
	User string `json:"user,omitempty"`
}

type expiresAfter struct {
	Anchor  string `json:"anchor"`
	Minutes int64  `json:"minutes"`
}

type networkPolicy struct {
	Type string `json:"type"`
}

func containerOf(sb *executorv1.Sandbox) container {
	c := container{
		ID: sb.GetId(), Object: "container", CreatedAt: sb.GetCreatedAt().GetSeconds(), Status: "running",
		Name: sb.GetName(), LastActiveAt: sb.GetLastUsedAt().GetSeconds(),
		NetworkPolicy: networkPolicy{Type: "disabled"}, User: sb.GetUser(),
	}
	switch sb.GetState() {
	case executorv1.SandboxState_SANDBOX_STATE_STOPPING, executorv1.SandboxState_SANDBOX_STATE_GONE:
		c.Status = "expired"
	}
	if s := sb.GetIdleTimeoutSeconds(); s > 0 {
		c.ExpiresAfter = &expiresAfter{Anchor: "last_active_at", Minutes: int64(s+59) / 60}
	}
	for name, b := range memoryLimits {
		if sb.GetLimits().GetMemoryBytes() == b {
			c.MemoryLimit = name
		}
	}
	return c
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// fail answers err in OpenAI's error shape. notFound is the message of a
// NotFound, in OpenAI's words for what was looked up.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error, notFound string) {
	var fe *fieldError
	if errors.As(err, &fe) {
		code, st := cmp.Or(fe.code, "invalid_request"), cmp.Or(fe.status, http.StatusBadRequest)
		openai.WriteError(w, st, "invalid_request_error", code, fe.param, fe.Error())
		return
	}
	a := errs.Public(err)
	switch errs.KindOf(err) {
	case errs.Canceled:
		return // the client went away
	case errs.NotFound:
		if notFound != "" {
			a.Message = notFound
		}
	}
	if a.Hidden {
		h.log.ErrorContext(r.Context(), "containers request failed", "error", err, "path", r.URL.Path)
	}
	openai.WriteAnswer(w, a)
}

func noContainer(id string) string { return "No container found with id '" + id + "'." }

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		h.fail(w, r, &fieldError{status: http.StatusRequestEntityTooLarge, code: "request_too_large", msg: "request body is larger than 1 MiB"}, "")
		return
	}
	p, err := parseCreate(body)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	req := &executorv1.CreateSandboxRequest{
		Name: p.Name, IdleTimeoutSeconds: int32(p.IdleMinutes * 60),
		Limits: &executorv1.Limits{MemoryBytes: memoryLimits[p.MemoryLimit]},
		User:   p.User, Persistent: p.User != "",
		Template: p.Template,
	}
	if len(p.Skills) > 0 {
		if h.skills == nil {
			h.fail(w, r, badField("skills", "this router keeps no skills"), "")
			return
		}
		account, err := tenant.Account(r.Context())
		if err != nil {
			h.fail(w, r, err, "")
			return
		}
		mounted, err := h.skills.Mount(r.Context(), account, p.Skills)
		if err != nil {
			h.fail(w, r, err, "")
			return
		}
		for _, m := range mounted {
			req.Skills = append(req.Skills, m.Bundle)
		}
	}
	resp, err := h.exec.CreateSandbox(r.Context(), req)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	writeJSON(w, containerOf(resp.GetSandbox()))
}

// listPage is OpenAI's list object.
type listPage[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

func pageOf[T any](items []T, id func(T) string, more bool) listPage[T] {
	l := listPage[T]{Object: "list", Data: items, HasMore: more}
	if l.Data == nil {
		l.Data = []T{}
	}
	if len(items) > 0 {
		first, last := id(items[0]), id(items[len(items)-1])
		l.FirstID, l.LastID = &first, &last
	}
	return l
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	p, err := parseList(r.URL.Query(), true)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	resp, err := h.exec.ListSandboxes(r.Context(), &executorv1.ListSandboxesRequest{})
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	var sbs []*executorv1.Sandbox
	for _, sb := range resp.GetSandboxes() {
		if p.Name == "" || sb.GetName() == p.Name {
			sbs = append(sbs, sb)
		}
	}
	// In creation order to the nanosecond: two containers made within a
	// second keep their order.
	slices.SortFunc(sbs, func(a, b *executorv1.Sandbox) int {
		return cmp.Or(a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime()), cmp.Compare(a.GetId(), b.GetId()))
	})
	all := make([]container, len(sbs))
	for i, sb := range sbs {
		all[i] = containerOf(sb)
	}
	id := func(c container) string { return c.ID }
	items, more, err := page(all, id, p)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	writeJSON(w, pageOf(items, id, more))
}

// sandbox returns the caller's container id.
func (h *Handler) sandbox(ctx context.Context, id string) (*executorv1.Sandbox, error) {
	resp, err := h.exec.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return resp.GetSandbox(), nil
}

func (h *Handler) retrieve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("container_id")
	sb, err := h.sandbox(r.Context(), id)
	if err != nil {
		h.fail(w, r, err, noContainer(id))
		return
	}
	writeJSON(w, containerOf(sb))
}

// deleted is OpenAI's answer to a delete.
type deleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("container_id")
	if _, err := h.exec.DestroySandbox(r.Context(), &executorv1.DestroySandboxRequest{Id: id}); err != nil {
		h.fail(w, r, err, noContainer(id))
		return
	}
	writeJSON(w, deleted{ID: id, Object: "container.deleted", Deleted: true})
}
