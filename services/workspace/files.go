package workspace

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/workspace/files"
)

// List lists a directory.
func (s *Server) List(ctx context.Context, req *workspacev1.ListRequest) (*workspacev1.ListResponse, error) {
	ws, _, err := fileScope(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := s.files.List(ctx, ws, req.GetPath())
	if err != nil {
		return nil, err
	}
	out := &workspacev1.ListResponse{Entries: make([]*workspacev1.Entry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = toProto(e)
	}
	return out, nil
}

// Stat returns one entry's metadata.
func (s *Server) Stat(ctx context.Context, req *workspacev1.StatRequest) (*workspacev1.StatResponse, error) {
	ws, _, err := fileScope(ctx)
	if err != nil {
		return nil, err
	}
	e, err := s.files.Stat(ctx, ws, req.GetPath())
	if err != nil {
		return nil, err
	}
	return &workspacev1.StatResponse{Entry: toProto(e)}, nil
}

// ReadFile streams a file's content.
func (s *Server) ReadFile(req *workspacev1.ReadFileRequest, stream workspacev1.WorkspaceService_ReadFileServer) error {
	ctx := stream.Context()
	ws, _, err := fileScope(ctx)
	if err != nil {
		return err
	}
	rc, e, err := s.files.Open(ctx, ws, req.GetPath())
	if err != nil {
		return err
	}
	defer rc.Close()
	return sendContent(rc, e, func(entry *workspacev1.Entry, data []byte) error {
		return stream.Send(&workspacev1.ReadFileResponse{Entry: entry, Data: data})
	})
}

// WriteFile stores a file from a stream: a header, then data.
func (s *Server) WriteFile(stream workspacev1.WorkspaceService_WriteFileServer) error {
	ctx := stream.Context()
	ws, _, err := fileScope(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return errs.New(errs.InvalidArgument, "the first message of WriteFile must be the header")
	}
	o := files.WriteOptions{Mode: h.GetMode(), Size: -1}
	if h.Size != nil {
		if h.GetSize() < 0 {
			return errs.New(errs.InvalidArgument, "header.size: must not be negative")
		}
		o.Size = h.GetSize()
	}
	if h.GetModified() != nil {
		if err := h.GetModified().CheckValid(); err != nil {
			return errs.New(errs.InvalidArgument, "header.modified: %v", err)
		}
		o.ModTime = h.GetModified().AsTime()
	}
	// One message for every data message: with chunks.Codec, each one's
	// content lands in the buffer of the one before, which dataReader is
	// done with when it asks for more.
	m := new(workspacev1.WriteFileRequest)
	r := &dataReader{recv: func() ([]byte, error) {
		if err := stream.RecvMsg(m); err != nil {
			return nil, err
		}
		if _, ok := m.GetMessage().(*workspacev1.WriteFileRequest_Data); !ok {
			return nil, errs.New(errs.InvalidArgument, "after the header, WriteFile takes only data messages")
		}
		return m.GetData(), nil
	}}
	e, err := s.files.Write(ctx, ws, h.GetPath(), r, o)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&workspacev1.WriteFileResponse{Entry: toProto(e)})
}

// Mkdir creates a directory and its parents.
func (s *Server) Mkdir(ctx context.Context, req *workspacev1.MkdirRequest) (*workspacev1.MkdirResponse, error) {
	ws, _, err := fileScope(ctx)
	if err != nil {
		return nil, err
	}
	e, err := s.files.Mkdir(ctx, ws, req.GetPath())
	if err != nil {
		return nil, err
	}
	return &workspacev1.MkdirResponse{Entry: toProto(e)}, nil
}

// Delete deletes a file or a directory.
func (s *Server) Delete(ctx context.Context, req *workspacev1.DeleteRequest) (*workspacev1.DeleteResponse, error) {
	ws, _, err := fileScope(ctx)
	if err != nil {
		return nil, err
	}
	n, err := s.files.Delete(ctx, ws, req.GetPath(), req.GetRecursive())
	if err != nil {
		return nil, err
	}
	return &workspacev1.DeleteResponse{Deleted: n}, nil
}

// CreatePublicURL signs a temporary public URL for one file.
func (s *Server) CreatePublicURL(ctx context.Context, req *workspacev1.CreatePublicURLRequest) (*workspacev1.CreatePublicURLResponse, error) {
	ws, sc, err := fileScope(ctx)
	if err != nil {
		return nil, err
	}
	ttl, err := signing.TTL(int64(req.GetExpiresInSeconds()))
	if err != nil {
		return nil, err
	}
	if sc.PublicURL == "" {
		return nil, errs.New(errs.FailedPrecondition, "the router passed no public base URL; set --public-url")
	}
	e, err := s.files.Stat(ctx, ws, req.GetPath())
	if err != nil {
		return nil, err
	}
	if e.Type != files.File {
		return nil, errs.New(errs.FailedPrecondition, "%s: not a regular file; only files can be shared", e.Path)
	}
	exp := time.Now().Add(ttl).Truncate(time.Second)
	tok, err := s.signer.Sign(signing.Claims{Account: ws.Account, User: ws.User, Path: e.Path, ETag: e.ETag, Expires: exp.Unix()})
	if err != nil {
		return nil, err
	}
	return &workspacev1.CreatePublicURLResponse{Url: sc.PublicURL + PublicPath + tok, ExpiresAt: timestamppb.New(exp)}, nil
}

// PublicPath is the router path of signed public URLs, before the token.
const PublicPath = "/public/v1/files/"

// ReadPublicFile streams the file a signed URL names; it needs no account.
func (s *Server) ReadPublicFile(req *workspacev1.ReadPublicFileRequest, stream workspacev1.WorkspaceService_ReadPublicFileServer) error {
	c, err := s.signer.Verify(req.GetToken())
	if err != nil {
		return err
	}
	ws, err := files.NewWorkspace(c.Account, c.User)
	if err != nil {
		return errs.New(errs.PermissionDenied, "public URL is not valid")
	}
	ctx := stream.Context()
	rc, e, err := s.files.OpenVersion(ctx, ws, c.Path, c.ETag)
	if err != nil {
		return err
	}
	defer rc.Close()
	return sendContent(rc, e, func(entry *workspacev1.Entry, data []byte) error {
		return stream.Send(&workspacev1.ReadPublicFileResponse{Entry: entry, Data: data})
	})
}

// dataReader reads the data messages of a stream as one byte stream.
type dataReader struct {
	recv func() ([]byte, error)
	buf  []byte
}

func (d *dataReader) Read(p []byte) (int, error) {
	for len(d.buf) == 0 {
		b, err := d.recv()
		if err != nil {
			return 0, err
		}
		d.buf = b
	}
	n := copy(p, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}
