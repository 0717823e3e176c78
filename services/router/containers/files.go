package containers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// file is OpenAI's container file object.
type file struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Bytes       int64  `json:"bytes"`
	ContainerID string `json:"container_id"`
	CreatedAt   int64  `json:"created_at"`
	Path        string `json:"path"`
	Source      string `json:"source"`
}

// fileOf is f of container id. A sandbox file has no creation time, so
// created_at is its last modification; source is user for what an upload
// wrote and assistant for what the sandbox's commands made or changed.
func fileOf(id string, f *executorv1.SandboxFile) file {
	src := "assistant"
	if f.GetWrittenByApi() {
		src = "user"
	}
	return file{ID: fileID(f.GetPath()), Object: "container.file", Bytes: f.GetSize(), ContainerID: id,
		CreatedAt: f.GetModified().GetSeconds(), Path: f.GetPath(), Source: src}
}

func noFile(container, id string) string {
	return "No file found with id '" + id + "' in container '" + container + "'."
}

// withContainer answers NotFound for a container that is not the
// caller's before a file call names it; the file call's own NotFound is
// then the file's.
func (h *Handler) withContainer(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("container_id")
	if _, err := h.sandbox(r.Context(), id); err != nil {
		h.fail(w, r, err, noContainer(id))
		return "", false
	}
	return id, true
}

// withFile is withContainer, then the path of the file the request names.
func (h *Handler) withFile(w http.ResponseWriter, r *http.Request) (string, string, bool) {
	id, ok := h.withContainer(w, r)
	if !ok {
		return "", "", false
	}
	fid := r.PathValue("file_id")
	p, ok := filePath(fid)
	if !ok {
		h.fail(w, r, errs.New(errs.NotFound, "no such file"), noFile(id, fid))
		return "", "", false
	}
	return id, p, true
}

// createFile takes an upload as multipart/form-data in the field file, as
// OpenAI's clients send it; a file_id, in a form or in JSON, names a file
// of OpenAI's Files API, which conch does not have.
func (h *Handler) createFile(w http.ResponseWriter, r *http.Request) {
	id, ok := h.withContainer(w, r)
	if !ok {
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data":
	case "application/json":
		var body map[string]json.RawMessage
		_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody)).Decode(&body)
		if _, ok := body["file_id"]; ok {
			h.fail(w, r, noFileIDs(), "")
			return
		}
		h.fail(w, r, badField("file", "required: upload the file as multipart/form-data in a field named file"), "")
		return
	default:
		h.fail(w, r, badField("file", "upload the file as multipart/form-data in a field named file"), "")
		return
	}
	// The form's framing is allowed on top of the file's bytes.
	r.Body = http.MaxBytesReader(w, r.Body, MaxFileBytes+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		h.fail(w, r, badField("file", "the multipart body cannot be read: %v", err), "")
		return
	}
	var written *executorv1.SandboxFile
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			h.failUpload(w, r, badField("file", "the multipart body cannot be read: %v", err))
			return
		}
		switch name := part.FormName(); name {
		case "file":
			if written != nil {
				h.failUpload(w, r, badField("file", "given more than once"))
				return
			}
			p, err := uploadPath(partFileName(http.Header(part.Header)))
			if err == nil {
				written, err = h.upload(r.Context(), id, p, part)
			}
			if err != nil {
				h.failUpload(w, r, err)
				return
			}
		case "file_id":
			h.failUpload(w, r, noFileIDs())
			return
		default:
			h.failUpload(w, r, badField(name, "unrecognized request argument"))
			return
		}
	}
	if written == nil {
		h.fail(w, r, badField("file", "required"), "")
		return
	}
	writeJSON(w, fileOf(id, written))
}

func noFileIDs() error {
	return badField("file_id", "conch has no Files API to copy files from; upload the file itself as multipart/form-data in a field named file")
}

// failUpload answers an upload refused before its body was read to the
// end: the connection is closed rather than the rest read.
func (h *Handler) failUpload(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		err = tooLarge()
	case errs.KindOf(err) == errs.ResourceExhausted:
		// A file over the limit or a full workspace: what is too large
		// is the request, and waiting does not help.
		err = &fieldError{status: http.StatusRequestEntityTooLarge, code: "request_too_large", param: "file", msg: errs.Public(err).Message}
	}
	w.Header().Set("Connection", "close")
	h.fail(w, r, err, "")
}

func tooLarge() error {
	return &fieldError{status: http.StatusRequestEntityTooLarge, code: "request_too_large", param: "file",
		msg: "larger than the limit of " + strconv.Itoa(MaxFileBytes) + " bytes (100 MiB)"}
}

// upload streams src into the file p of sandbox id. Beyond MaxFileBytes
// the stream is canceled, which leaves nothing behind.
func (h *Handler) upload(ctx context.Context, id, p string, src io.Reader) (*executorv1.SandboxFile, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := h.exec.WriteFile(ctx)
	if err != nil {
		return nil, err
	}
	msg := &executorv1.WriteFileRequest{SandboxId: id, Path: p}
	buf := make([]byte, chunks.Size)
	var total int64
	for {
		n, rerr := chunks.Fill(src, buf)
		total += int64(n)
		if total > MaxFileBytes {
			return nil, tooLarge()
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			var tooBig *http.MaxBytesError
			if errors.As(rerr, &tooBig) {
				return nil, tooLarge()
			}
			// The client's body broke off or is not a valid form.
			return nil, badField("file", "reading the upload failed: %v", rerr)
		}
		if n > 0 || msg.SandboxId != "" {
			msg.Data = buf[:n]
			if err := stream.Send(msg); errors.Is(err, io.EOF) {
				break // the executor ended the stream; CloseAndRecv says why
			} else if err != nil {
				return nil, err
			}
			msg = &executorv1.WriteFileRequest{}
		}
		if rerr != nil {
			break
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.GetFile(), nil
}

func (h *Handler) listFiles(w http.ResponseWriter, r *http.Request) {
	p, err := parseList(r.URL.Query(), false)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	id, ok := h.withContainer(w, r)
	if !ok {
		return
	}
	resp, err := h.exec.ListFiles(r.Context(), &executorv1.ListFilesRequest{SandboxId: id})
	if err != nil {
		h.fail(w, r, err, noContainer(id))
		return
	}
	all := make([]file, 0, len(resp.GetFiles()))
	for _, f := range resp.GetFiles() {
		all = append(all, fileOf(id, f))
	}
	slices.SortFunc(all, func(a, b file) int { return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.Path, b.Path)) })
	fid := func(f file) string { return f.ID }
	items, more, err := page(all, fid, p)
	if err != nil {
		h.fail(w, r, err, "")
		return
	}
	writeJSON(w, pageOf(items, fid, more))
}

func (h *Handler) retrieveFile(w http.ResponseWriter, r *http.Request) {
	id, p, ok := h.withFile(w, r)
	if !ok {
		return
	}
	resp, err := h.exec.StatFile(r.Context(), &executorv1.StatFileRequest{SandboxId: id, Path: p})
	if err != nil {
		h.fail(w, r, err, noFile(id, r.PathValue("file_id")))
		return
	}
	writeJSON(w, fileOf(id, resp.GetFile()))
}

func (h *Handler) deleteFile(w http.ResponseWriter, r *http.Request) {
	id, p, ok := h.withFile(w, r)
	if !ok {
		return
	}
	if _, err := h.exec.DeleteFile(r.Context(), &executorv1.DeleteFileRequest{SandboxId: id, Path: p}); err != nil {
		h.fail(w, r, err, noFile(id, r.PathValue("file_id")))
		return
	}
	writeJSON(w, deleted{ID: r.PathValue("file_id"), Object: "container.file.deleted", Deleted: true})
}

// fileContent streams a file's bytes.
func (h *Handler) fileContent(w http.ResponseWriter, r *http.Request) {
	id, p, ok := h.withFile(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := h.exec.ReadFile(ctx, &executorv1.ReadFileRequest{SandboxId: id, Path: p})
	if err != nil {
		h.fail(w, r, err, noFile(id, r.PathValue("file_id")))
		return
	}
	first, err := stream.Recv()
	if err != nil {
		h.fail(w, r, err, noFile(id, r.PathValue("file_id")))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.FormatInt(first.GetFile().GetSize(), 10))
	if d := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}); d != "" {
		hd.Set("Content-Disposition", d)
	}
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(first.GetData())
	for {
		m, err := stream.Recv()
		if err != nil {
			// The status is sent: a failure midway can only cut the
			// body short of its Content-Length, which clients notice.
			if !errors.Is(err, io.EOF) {
				h.log.WarnContext(r.Context(), "container file download failed", "error", err, "container", id)
			}
			return
		}
		if _, err := w.Write(m.GetData()); err != nil {
			return
		}
	}
}
