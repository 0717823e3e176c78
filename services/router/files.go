package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/router/apierror"
)

// MaxUploadBytes is the largest upload of the file API
// (docs/how-to/workspace-files.md).
const MaxUploadBytes = contract.MaxFileBytes

const (
	// DefaultUploadIdleTimeout bounds the wait for the next bytes of an
	// upload, so a slow body cannot hold a connection forever.
	DefaultUploadIdleTimeout = 30 * time.Second
	// publicFilesPath is the route of signed public URLs.
	publicFilesPath = "/public/v1/files/"
)

// fileRoutes serves the file API routes that grpc-gateway cannot: streamed
// downloads and uploads, and signed public URLs.
type fileRoutes struct {
	ws   workspacev1.WorkspaceServiceClient
	log  *slog.Logger
	idle time.Duration
}

// register adds the routes to mux; auth wraps the authenticated ones and
// gw is the grpc-gateway mux serving the file API's JSON calls.
func (f *fileRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler, gw http.Handler) {
	mux.Handle("/api/v1/shell/io/", auth(validQuery(gw)))
	mux.Handle("GET /api/v1/shell/io/download", auth(validQuery(http.HandlerFunc(f.download))))
	mux.Handle("PUT /api/v1/shell/io/upload", auth(validQuery(http.HandlerFunc(f.upload))))
	mux.HandleFunc(publicFilesPath+"{token}", f.public)
	// Anything else below the public path is a changed URL.
	mux.HandleFunc(publicFilesPath, func(w http.ResponseWriter, _ *http.Request) {
		apiErrors(w, errs.New(errs.PermissionDenied, "public URL is not valid"))
	})
}

// validQuery refuses a query string that does not decode to UTF-8: it
// could not travel in a protobuf string, and is no path of a workspace.
func validQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			apiErrors(w, errs.New(errs.InvalidArgument, "query: %v", err))
			return
		}
		for k, vs := range q {
			for _, v := range vs {
				if !utf8.ValidString(k) || !utf8.ValidString(v) {
					apiErrors(w, errs.Invalid(k, "not valid UTF-8"))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// onePath returns the single "path" query parameter.
func onePath(r *http.Request) (string, bool) {
	v := r.URL.Query()["path"]
	if len(v) != 1 {
		return "", false
	}
	return v[0], true
}

// download streams a file as an attachment.
func (f *fileRoutes) download(w http.ResponseWriter, r *http.Request) {
	p, ok := onePath(r)
	if !ok {
		apiErrors(w, errs.Invalid("path", "exactly one path query parameter is required"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := f.ws.ReadFile(ctx, &workspacev1.ReadFileRequest{Path: p}, chunks.CallOption())
	if err != nil {
		f.fail(w, r, err)
		return
	}
	serveStream(w, r, f.fail, recvInto(stream, new(workspacev1.ReadFileResponse)), func(m *workspacev1.ReadFileResponse) (*workspacev1.Entry, []byte) {
		return m.GetEntry(), m.GetData()
	})
}

// public serves a signed public URL: no auth, GET only, the exact URL.
func (f *fileRoutes) public(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		apiErrors(w, errs.New(errs.PermissionDenied, "public URLs answer GET only"))
		return
	}
	token := r.PathValue("token")
	if r.URL.RawQuery != "" || r.URL.ForceQuery || r.URL.EscapedPath() != publicFilesPath+token {
		apiErrors(w, errs.New(errs.PermissionDenied, "public URL is not valid"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := f.ws.ReadPublicFile(ctx, &workspacev1.ReadPublicFileRequest{Token: token}, chunks.CallOption())
	if err != nil {
		f.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "private, no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	serveStream(w, r, f.fail, recvInto(stream, new(workspacev1.ReadPublicFileResponse)), func(m *workspacev1.ReadPublicFileResponse) (*workspacev1.Entry, []byte) {
		return m.GetEntry(), m.GetData()
	})
}

// recvInto receives every message of s into m: with chunks.Codec, each
// one's content lands in the buffer of the one before, which serveStream
// has written out when it asks for the next.
func recvInto[M any](s grpc.ClientStream, m M) func() (M, error) {
	return func() (M, error) { return m, s.RecvMsg(m) }
}

// serveStream writes a file stream: headers from the first message's entry,
// then the bytes. An error before the headers is answered in the API's
// envelope; one after them aborts the connection, so a client never takes
// a cut file for a whole one.
func serveStream[M any](w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, *http.Request, error), recv func() (M, error), parts func(M) (*workspacev1.Entry, []byte)) {
	first, err := recv()
	if err != nil {
		fail(w, r, err)
		return
	}
	entry, data := parts(first)
	if entry == nil {
		fail(w, r, errs.New(errs.Internal, "file stream began without its entry"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Content-Disposition", attachment(entry.GetName()))
	h.Set("Content-Length", strconv.FormatInt(entry.GetSize(), 10))
	if entry.GetEtag() != "" {
		h.Set("ETag", `"`+entry.GetEtag()+`"`)
	}
	if m := entry.GetModified(); m != nil {
		h.Set("Last-Modified", m.AsTime().UTC().Format(http.TimeFormat))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	written := int64(0)
	for {
		if len(data) > 0 {
			if _, err := w.Write(data); err != nil {
				return // the client went away; the deferred cancel stops the stream
			}
			written += int64(len(data))
		}
		m, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		_, data = parts(m)
	}
	if written != entry.GetSize() {
		panic(http.ErrAbortHandler)
	}
}

// attachment is a Content-Disposition that makes browsers download, never
// render, with the name in both the plain and the RFC 5987 forms.
func attachment(name string) string {
	ascii := strings.Map(func(r rune) rune {
		if r < 0x20 || r >= 0x7f || r == '"' || r == '\\' || r == '/' || r == ';' {
			return '_'
		}
		return r
	}, name)
	if ascii == "" {
		ascii = "download"
	}
	if d := mime.FormatMediaType("attachment", map[string]string{"filename": name}); d != "" && ascii == name {
		return d
	}
	return `attachment; filename="` + ascii + `"; filename*=UTF-8''` + rfc5987(name)
}

func rfc5987(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// upload streams the request body into WriteFile. More than MaxUploadBytes
// is 413, whatever Content-Length said, and nothing is stored: the stream is
// canceled before its end, which discards the upload.
func (f *fileRoutes) upload(w http.ResponseWriter, r *http.Request) {
	p, ok := onePath(r)
	if !ok {
		apiErrors(w, errs.Invalid("path", "exactly one path query parameter is required"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	header := &workspacev1.WriteFileHeader{Path: p}
	if r.ContentLength >= 0 {
		header.Size = &r.ContentLength
	}
	var stream workspacev1.WorkspaceService_WriteFileClient
	resp, ok := streamBody(w, r, cancel, body{max: MaxUploadBytes, idle: f.idle, fail: f.fail},
		func() error {
			var err error
			if stream, err = f.ws.WriteFile(ctx, chunks.CallOption()); err != nil {
				return err
			}
			return stream.Send(&workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Header{Header: header}})
		},
		func(b []byte) error {
			return stream.Send(&workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: b}})
		},
		func() (proto.Message, error) {
			resp, err := stream.CloseAndRecv()
			return resp.GetEntry(), err
		})
	if ok {
		writeProto(w, r, f.fail, resp)
	}
}

// body bounds a request body streamed to a service: at most max bytes,
// none of its reads waiting longer than idle; fail answers a service's
// error.
type body struct {
	max  int64
	idle time.Duration
	fail func(http.ResponseWriter, *http.Request, error)
}

// streamBody streams r's body to a client stream: open starts it, send
// sends each chunk, and closeRecv ends it and returns what to answer. A
// body over b.max is 413, whatever Content-Length said; a stalled one
// 408; in both, cancel ends the stream before its end, which stores
// nothing. It reports whether it answered nothing yet, so the caller
// writes the answer.
func streamBody(w http.ResponseWriter, r *http.Request, cancel func(), b body, open func() error, send func([]byte) error, closeRecv func() (proto.Message, error)) (proto.Message, bool) {
	tooLarge := func() {
		w.Header().Set("Connection", "close")
		apiErrors(w, errs.NewReason(errs.ResourceExhausted, errs.ReasonRequestTooLarge, "upload larger than the limit of %d bytes (%d MiB)", b.max, b.max>>20))
	}
	if r.ContentLength > b.max {
		tooLarge()
		return nil, false
	}
	if err := open(); err != nil && !errors.Is(err, io.EOF) {
		b.fail(w, r, err)
		return nil, false
	}
	rc := http.NewResponseController(w)
	in := &idleReader{r: http.MaxBytesReader(w, r.Body, b.max), rc: rc, idle: b.idle}
	buf := make([]byte, chunks.Size)
	for {
		n, rerr := chunks.Fill(in, buf)
		if rerr != nil && rerr != io.EOF {
			// A failed body is answered before anything else: the bytes
			// read with it are dropped and the canceled stream stores
			// nothing.
			cancel()
			var tooBig *http.MaxBytesError
			switch {
			case errors.As(rerr, &tooBig):
				tooLarge()
			case errors.Is(rerr, os.ErrDeadlineExceeded):
				w.Header().Set("Connection", "close")
				apiErrors(w, errs.NewReason(errs.DeadlineExceeded, errs.ReasonRequestTimeout, "the upload body stalled: no bytes for %s", b.idle))
			default:
				w.Header().Set("Connection", "close")
				apiErrors(w, errs.New(errs.InvalidArgument, "reading the request body failed: %v", rerr))
			}
			return nil, false
		}
		if n > 0 {
			err := send(buf[:n])
			if errors.Is(err, io.EOF) {
				break // the service ended the stream; closeRecv has why
			}
			if err != nil {
				drain(in)
				b.fail(w, r, err)
				return nil, false
			}
		}
		if rerr == io.EOF {
			break // the body is complete
		}
	}
	resp, err := closeRecv()
	if err != nil {
		drain(in)
		b.fail(w, r, err)
		return nil, false
	}
	_ = rc.SetReadDeadline(time.Time{})
	return resp, true
}

// writeProto answers m in the API's JSON.
func writeProto(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, *http.Request, error), m proto.Message) {
	b, err := restjson.New().Marshal(m)
	if err != nil {
		fail(w, r, errs.Wrap(errs.Internal, err, "encode the answer"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// drain reads what is left of a body the service gave up on (its storage
// failed mid-upload), within the upload limit and the idle timeout. A
// client still sending would otherwise have its connection reset when the
// server closes it with the body unread, and never see the answer saying
// why the upload failed.
func drain(body io.Reader) {
	_, _ = io.Copy(io.Discard, body)
}

// idleReader moves the connection's read deadline before each read, so a
// body may be slow but not stall.
type idleReader struct {
	r    io.Reader
	rc   *http.ResponseController
	idle time.Duration
}

func (i *idleReader) Read(p []byte) (int, error) {
	_ = i.rc.SetReadDeadline(time.Now().Add(i.idle))
	return i.r.Read(p)
}

// fail answers err in the API's envelope, logging what the client is not
// told.
func (f *fileRoutes) fail(w http.ResponseWriter, r *http.Request, err error) {
	apierror.Write(r.Context(), f.log, w, err)
}
