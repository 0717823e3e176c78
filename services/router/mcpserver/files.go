package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/router/toolhost"
)

// Limits of the file tools. A tool call's content travels inside one
// JSON-RPC message, so files are smaller here than through the REST file
// API (docs/how-to/workspace-files.md), which streams up to 100 MiB.
const (
	// MaxFileBytes is the largest file read_file returns and write_file
	// writes.
	MaxFileBytes = 1 << 20
	// workspaceDir is the sandbox's workspace.
	workspaceDir = contract.WorkspaceDir
	// resourcePrefix names a workspace file as an MCP resource.
	resourcePrefix = "conch://workspace/"
)

const pathProp = `"path":{"type":"string","minLength":1,"description":"Workspace path, e.g. /notes/a.txt (also accepted: /home/workspace/notes/a.txt or notes/a.txt)."}`

// fileTools are the tools on the session's workspace (docs/reference/mcp.md).
func (s *session) fileTools() []tool {
	defs := []struct {
		name, desc, schema string
		ann                *mcp.ToolAnnotations
		run                func(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) *mcp.CallToolResult
	}{
		{"read_file", fmt.Sprintf("Read a file of the session's workspace (/home/workspace): text as text, other bytes as a base64 blob. At most %d bytes; larger files: read slices with the shell.", MaxFileBytes),
			`{"type":"object","properties":{` + pathProp + `},"required":["path"],"additionalProperties":false}`,
			&mcp.ToolAnnotations{Title: "Read a workspace file", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}, s.readFile},
		{"write_file", fmt.Sprintf("Write a file of the session's workspace, replacing it; missing parent directories are made. At most %d bytes.", MaxFileBytes),
			`{"type":"object","properties":{` + pathProp + `,"content":{"type":"string","description":"The content."},"encoding":{"type":"string","enum":["utf-8","base64"],"description":"How content is encoded; default utf-8."}},"required":["path","content"],"additionalProperties":false}`,
			&mcp.ToolAnnotations{Title: "Write a workspace file", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}, s.writeFile},
		{"list_files", "List the regular files of the session's workspace beneath a directory (default the whole workspace), with size and modification time; at most 10,000.",
			`{"type":"object","properties":{"path":{"type":"string","description":"Directory to list; default /."}},"additionalProperties":false}`,
			&mcp.ToolAnnotations{Title: "List workspace files", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}, s.listFiles},
		{"stat", "Size and modification time of a regular file of the session's workspace; an error when there is none.",
			`{"type":"object","properties":{` + pathProp + `},"required":["path"],"additionalProperties":false}`,
			&mcp.ToolAnnotations{Title: "Stat a workspace file", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}, s.statFile},
		{"delete", "Delete a regular file of the session's workspace (directories: use the shell).",
			`{"type":"object","properties":{` + pathProp + `},"required":["path"],"additionalProperties":false}`,
			&mcp.ToolAnnotations{Title: "Delete a workspace file", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)}, s.deleteFile},
	}
	if s.toolbox.Persistent() {
		defs = append(defs, struct {
			name, desc, schema string
			ann                *mcp.ToolAnnotations
			run                func(ctx context.Context, req *mcp.CallToolRequest, args json.RawMessage) *mcp.CallToolResult
		}{"public_url", "A link anyone can GET, without auth, to one file of the persistent workspace, until it expires.",
			`{"type":"object","properties":{` + pathProp + `,"expires_in_seconds":{"type":"integer","minimum":1,"maximum":604800,"description":"Lifetime, 1-604800 seconds; default 3600."}},"required":["path"],"additionalProperties":false}`,
			&mcp.ToolAnnotations{Title: "Share a workspace file", OpenWorldHint: ptr(true)}, s.publicURL})
	}
	out := make([]tool, 0, len(defs))
	for _, d := range defs {
		schema, err := toolhost.CompileSchema(json.RawMessage(d.schema))
		if err != nil {
			panic(fmt.Sprintf("mcpserver: schema of %s: %v", d.name, err))
		}
		out = append(out, tool{def: &mcp.Tool{Name: d.name, Description: d.desc, InputSchema: json.RawMessage(d.schema), Annotations: d.ann}, schema: schema, run: d.run})
	}
	return out
}

// workspacePath turns what a client named into the workspace-absolute path
// (docs/reference/mcp.md): "/notes/a.txt", "/home/workspace/notes/a.txt" and
// "notes/a.txt" all name /notes/a.txt. Anything that would leave the
// workspace is refused.
func workspacePath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("path: required")
	}
	if strings.ContainsRune(p, 0) || len(p) > 4096 {
		return "", fmt.Errorf("path: not a valid path")
	}
	if rest, ok := strings.CutPrefix(p, workspaceDir); ok && (rest == "" || rest[0] == '/') {
		p = rest
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("path: %q leaves the workspace", p)
		}
	}
	return path.Clean(p), nil
}

// sandboxPath is a workspace file's path in the sandbox.
func sandboxPath(p string) string {
	if p == "/" {
		return workspaceDir
	}
	return workspaceDir + p
}

// fileEntry is a file as the file tools describe it.
type fileEntry struct {
	Path     string    `json:"path"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

func entryOf(f *executorv1.SandboxFile) fileEntry {
	return fileEntry{Path: strings.TrimPrefix(f.GetPath(), workspaceDir), Size: f.GetSize(), Modified: f.GetModified().AsTime().UTC()}
}

type pathArgs struct {
	Path             string `json:"path"`
	Content          string `json:"content"`
	Encoding         string `json:"encoding"`
	ExpiresInSeconds int32  `json:"expires_in_seconds"`
}

// fileCall parses a file tool's arguments and finds the session's
// sandbox; a failure is the tool's error result.
func (s *session) fileCall(ctx context.Context, raw json.RawMessage, needPath bool) (pathArgs, string, string, *mcp.CallToolResult) {
	var a pathArgs
	if err := wirejson.Strict(raw, &a); err != nil {
		return a, "", "", errorResult(err.Error())
	}
	p := "/"
	if needPath || a.Path != "" {
		var err error
		if p, err = workspacePath(a.Path); err != nil {
			return a, "", "", errorResult(err.Error())
		}
		if needPath && p == "/" {
			return a, "", "", errorResult("path: names the workspace itself, not a file")
		}
	}
	id, err := s.toolbox.SandboxID(ctx)
	if err != nil {
		return a, "", "", errorResult("sandbox: " + message(err))
	}
	return a, p, id, nil
}

func (s *session) readFile(ctx context.Context, _ *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	_, p, id, fail := s.fileCall(ctx, raw, true)
	if fail != nil {
		return fail
	}
	data, f, err := s.read(ctx, id, p)
	if err != nil {
		return errorResult(err.Error())
	}
	entry := entryOf(f)
	rc := resourceContents(p, data)
	res := &mcp.CallToolResult{StructuredContent: map[string]any{"path": entry.Path, "size": entry.Size, "modified": entry.Modified, "mime_type": rc.MIMEType}}
	if rc.Blob == nil {
		res.Content = []mcp.Content{&mcp.TextContent{Text: rc.Text}}
	} else {
		res.Content = []mcp.Content{&mcp.EmbeddedResource{Resource: rc}}
	}
	return res
}

// read reads the file p of sandbox id, refusing one over MaxFileBytes.
func (s *session) read(ctx context.Context, id, p string) ([]byte, *executorv1.SandboxFile, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.opts.Executor.ReadFile(ctx, &executorv1.ReadFileRequest{SandboxId: id, Path: sandboxPath(p)})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s", p, message(err))
	}
	var (
		buf bytes.Buffer
		f   *executorv1.SandboxFile
	)
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return buf.Bytes(), f, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s", p, message(err))
		}
		if msg.GetFile() != nil {
			f = msg.GetFile()
			if f.GetSize() > MaxFileBytes {
				return nil, nil, fmt.Errorf("%s: %d bytes; read_file returns at most %d: read slices with the shell (sed -n, head -c) or download it through the REST file API", p, f.GetSize(), MaxFileBytes)
			}
		}
		if buf.Len()+len(msg.GetData()) > MaxFileBytes {
			return nil, nil, fmt.Errorf("%s: larger than %d bytes", p, MaxFileBytes)
		}
		buf.Write(msg.GetData())
	}
}

// resourceContents is a file as MCP resource contents: text when it is
// UTF-8 text, else a blob, with the MIME type its name suggests.
func resourceContents(p string, data []byte) *mcp.ResourceContents {
	mt := mime.TypeByExtension(path.Ext(p))
	if mt == "" {
		mt = http.DetectContentType(data)
	}
	rc := &mcp.ResourceContents{URI: resourcePrefix + strings.TrimPrefix(p, "/"), MIMEType: mt}
	if utf8.Valid(data) && !bytes.ContainsRune(data, 0) {
		rc.Text = string(data)
		if rc.Text == "" {
			rc.Blob = nil
		}
		return rc
	}
	rc.Blob = data
	return rc
}

func (s *session) writeFile(ctx context.Context, _ *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	a, p, id, fail := s.fileCall(ctx, raw, true)
	if fail != nil {
		return fail
	}
	data := []byte(a.Content)
	if a.Encoding == "base64" {
		var err error
		if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return errorResult("content: not valid base64: " + err.Error())
		}
	}
	if len(data) > MaxFileBytes {
		return errorResult(fmt.Sprintf("content: %d bytes; write_file writes at most %d: upload larger files through the REST file API", len(data), MaxFileBytes))
	}
	stream, err := s.opts.Executor.WriteFile(ctx)
	if err != nil {
		return errorResult(p + ": " + message(err))
	}
	first := &executorv1.WriteFileRequest{SandboxId: id, Path: sandboxPath(p)}
	for i := 0; i == 0 || i < len(data); i += chunks.Size {
		msg := first
		if i > 0 {
			msg = &executorv1.WriteFileRequest{}
		}
		msg.Data = data[i:min(i+chunks.Size, len(data))]
		if err := stream.Send(msg); err != nil {
			break // CloseAndRecv says why
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return errorResult(p + ": " + message(err))
	}
	s.notifyChanged(ctx)
	return entryResult(entryOf(resp.GetFile()))
}

func (s *session) listFiles(ctx context.Context, _ *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	_, dir, id, fail := s.fileCall(ctx, raw, false)
	if fail != nil {
		return fail
	}
	resp, err := s.opts.Executor.ListFiles(ctx, &executorv1.ListFilesRequest{SandboxId: id})
	if err != nil {
		return errorResult(message(err))
	}
	entries := []fileEntry{}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, f := range resp.GetFiles() {
		if e := entryOf(f); strings.HasPrefix(e.Path, prefix) {
			entries = append(entries, e)
		}
	}
	out := map[string]any{"entries": entries, "truncated": resp.GetTruncated()}
	b, _ := json.Marshal(out)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: out}
}

func (s *session) statFile(ctx context.Context, _ *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	_, p, id, fail := s.fileCall(ctx, raw, true)
	if fail != nil {
		return fail
	}
	resp, err := s.opts.Executor.StatFile(ctx, &executorv1.StatFileRequest{SandboxId: id, Path: sandboxPath(p)})
	if err != nil {
		return errorResult(p + ": " + message(err))
	}
	return entryResult(entryOf(resp.GetFile()))
}

func (s *session) deleteFile(ctx context.Context, _ *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	_, p, id, fail := s.fileCall(ctx, raw, true)
	if fail != nil {
		return fail
	}
	if _, err := s.opts.Executor.DeleteFile(ctx, &executorv1.DeleteFileRequest{SandboxId: id, Path: sandboxPath(p)}); err != nil {
		return errorResult(p + ": " + message(err))
	}
	s.notifyChanged(ctx)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted " + p}}}
}

func (s *session) publicURL(ctx context.Context, _ *mcp.CallToolRequest, raw json.RawMessage) *mcp.CallToolResult {
	a, p, _, fail := s.fileCall(ctx, raw, true)
	if fail != nil {
		return fail
	}
	resp, err := s.opts.Workspaces.CreatePublicURL(ctx, &workspacev1.CreatePublicURLRequest{Path: p, ExpiresInSeconds: a.ExpiresInSeconds})
	if err != nil {
		return errorResult(p + ": " + message(err))
	}
	out := map[string]any{"url": resp.GetUrl(), "expires_at": resp.GetExpiresAt().AsTime().UTC()}
	b, _ := json.Marshal(out)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: out}
}

func entryResult(e fileEntry) *mcp.CallToolResult {
	b, _ := json.Marshal(e)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: e}
}

// message is the text of an error for the client: a gRPC status's
// message, without the code.
func message(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// addResources serves the workspace's files as resources
// conch://workspace/{path}: listed, read and subscribed to.
func (s *session) addResources() {
	if s.toolbox.Shell() == nil {
		return
	}
	s.server.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "workspace",
		Title:       "Workspace files",
		Description: "A file of the session's workspace /home/workspace, by its workspace path.",
		URITemplate: resourcePrefix + "{+path}",
	}, s.readResource)
	s.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "resources/list" {
				return next(ctx, method, req)
			}
			return s.listResources(s.ctx(ctx))
		}
	})
}

// listResources lists the workspace's files as resources.
func (s *session) listResources(ctx context.Context) (mcp.Result, error) {
	id, err := s.toolbox.SandboxID(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s", message(err))
	}
	resp, err := s.opts.Executor.ListFiles(ctx, &executorv1.ListFilesRequest{SandboxId: id})
	if err != nil {
		return nil, fmt.Errorf("list files: %s", message(err))
	}
	res := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	for _, f := range resp.GetFiles() {
		e := entryOf(f)
		res.Resources = append(res.Resources, &mcp.Resource{
			URI: resourcePrefix + strings.TrimPrefix(e.Path, "/"), Name: path.Base(e.Path), Title: e.Path,
			MIMEType: mime.TypeByExtension(path.Ext(e.Path)), Size: e.Size,
		})
	}
	return res, nil
}

func (s *session) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ctx = s.ctx(ctx)
	uri := req.Params.URI
	rel, ok := strings.CutPrefix(uri, resourcePrefix)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	p, err := workspacePath(rel)
	if err != nil || p == "/" {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	id, err := s.toolbox.SandboxID(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s", message(err))
	}
	data, _, err := s.read(ctx, id, p)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound || strings.Contains(err.Error(), "not found") {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		return nil, err
	}
	rc := resourceContents(p, data)
	rc.URI = uri
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}, nil
}

// fileState is what a subscriber last heard of a file.
type fileState struct {
	size     int64
	modified int64 // Unix nanoseconds
	exists   bool
}

func (s *session) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	rel, ok := strings.CutPrefix(uri, resourcePrefix)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	if _, err := workspacePath(rel); err != nil {
		return mcp.ResourceNotFoundError(uri)
	}
	st := s.state(s.ctx(ctx), uri)
	s.mu.Lock()
	s.subscribed[uri] = st
	s.mu.Unlock()
	return nil
}

func (s *session) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	delete(s.subscribed, req.Params.URI)
	s.mu.Unlock()
	return nil
}

// state is the file of a resource URI as it is now.
func (s *session) state(ctx context.Context, uri string) fileState {
	p, err := workspacePath(strings.TrimPrefix(uri, resourcePrefix))
	if err != nil {
		return fileState{}
	}
	id, err := s.toolbox.SandboxID(ctx)
	if err != nil {
		return fileState{}
	}
	resp, err := s.opts.Executor.StatFile(ctx, &executorv1.StatFileRequest{SandboxId: id, Path: sandboxPath(p)})
	if err != nil {
		return fileState{}
	}
	return fileState{size: resp.GetFile().GetSize(), modified: resp.GetFile().GetModified().AsTime().UnixNano(), exists: true}
}

// notifyChanged tells subscribers of the files that changed since they
// last heard, after a call that may have changed them.
func (s *session) notifyChanged(ctx context.Context) {
	s.mu.Lock()
	uris := make([]string, 0, len(s.subscribed))
	for uri := range s.subscribed {
		uris = append(uris, uri)
	}
	s.mu.Unlock()
	for _, uri := range uris {
		now := s.state(ctx, uri)
		s.mu.Lock()
		before, still := s.subscribed[uri]
		if still {
			s.subscribed[uri] = now
		}
		s.mu.Unlock()
		if still && now != before {
			_ = s.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}
}
