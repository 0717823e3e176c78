package executor

import (
	"context"
	"errors"
	"io"
	"math"

	"google.golang.org/protobuf/types/known/timestamppb"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

func filePB(f File) *executorv1.SandboxFile {
	return &executorv1.SandboxFile{Path: f.Path, Size: f.Size, Modified: timestamppb.New(f.ModTime), WrittenByApi: f.WrittenByAPI}
}

// WriteFile streams a file into one of the caller's sandboxes.
func (s *Server) WriteFile(stream executorv1.ExecutorService_WriteFileServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return errs.New(errs.InvalidArgument, "sandbox_id: required in the first message")
	}
	if err != nil {
		return err
	}
	f, err := s.svc.WriteFile(ctx, account, first.GetSandboxId(), first.GetPath(), &uploadReader{stream: stream, pending: first.GetData()})
	if err != nil {
		return err
	}
	return stream.SendAndClose(&executorv1.WriteFileResponse{File: filePB(f)})
}

// uploadReader reads the data of a WriteFile stream.
type uploadReader struct {
	stream  executorv1.ExecutorService_WriteFileServer
	pending []byte
}

func (r *uploadReader) Read(b []byte) (int, error) {
	for len(r.pending) == 0 {
		m, err := r.stream.Recv()
		if err != nil {
			// io.EOF is the end of the upload; anything else (the
			// client canceled) fails it.
			return 0, err
		}
		r.pending = m.GetData()
	}
	n := copy(b, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// ReadFile streams a file of one of the caller's sandboxes.
func (s *Server) ReadFile(req *executorv1.ReadFileRequest, stream executorv1.ExecutorService_ReadFileServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	f, info, err := s.svc.OpenFile(ctx, account, req.GetSandboxId(), req.GetPath())
	if err != nil {
		return err
	}
	defer f.Close()
	if err := stream.Send(&executorv1.ReadFileResponse{File: filePB(info)}); err != nil {
		return err
	}
	// No more than the size announced: a file that grows meanwhile is
	// read as it was.
	buf := make([]byte, chunks.Size)
	r := io.LimitReader(f, info.Size)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if serr := stream.Send(&executorv1.ReadFileResponse{Data: buf[:n]}); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fileError(req.GetPath(), err)
		}
	}
}

// StatFile returns a file of one of the caller's sandboxes.
func (s *Server) StatFile(ctx context.Context, req *executorv1.StatFileRequest) (*executorv1.StatFileResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	f, err := s.svc.StatFile(ctx, account, req.GetSandboxId(), req.GetPath())
	if err != nil {
		return nil, err
	}
	return &executorv1.StatFileResponse{File: filePB(f)}, nil
}

// ListFiles lists the files of one of the caller's sandboxes.
func (s *Server) ListFiles(ctx context.Context, req *executorv1.ListFilesRequest) (*executorv1.ListFilesResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	files, truncated, err := s.svc.ListFiles(ctx, account, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	resp := &executorv1.ListFilesResponse{Files: make([]*executorv1.SandboxFile, 0, len(files)), Truncated: truncated}
	for _, f := range files {
		resp.Files = append(resp.Files, filePB(f))
	}
	return resp, nil
}

// DeleteFile deletes a file of one of the caller's sandboxes.
func (s *Server) DeleteFile(ctx context.Context, req *executorv1.DeleteFileRequest) (*executorv1.DeleteFileResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.svc.DeleteFile(ctx, account, req.GetSandboxId(), req.GetPath()); err != nil {
		return nil, err
	}
	return &executorv1.DeleteFileResponse{}, nil
}

// WatchFiles streams the changes under a directory of a sandbox.
func (s *Server) WatchFiles(req *executorv1.WatchFilesRequest, stream executorv1.ExecutorService_WatchFilesServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	return s.svc.WatchFiles(ctx, account, req.GetSandboxId(), req.GetPath(), req.GetRecursive(), func(ev wire.WatchEvent) error {
		return stream.Send(&executorv1.WatchFilesResponse{Op: ev.Op, Path: ev.Path, Dropped: int32(min(ev.Dropped, math.MaxInt32)), Overflow: ev.Overflow})
	})
}

// ExposePort exposes a port of a sandbox.
func (s *Server) ExposePort(ctx context.Context, req *executorv1.ExposePortRequest) (*executorv1.ExposePortResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.svc.ExposePort(ctx, account, req.GetSandboxId(), req.GetPort(), req.GetPublic(), req.GetExpiresInSeconds())
	if err != nil {
		return nil, err
	}
	return &executorv1.ExposePortResponse{Port: p}, nil
}

// ListPorts lists a sandbox's exposed ports.
func (s *Server) ListPorts(ctx context.Context, req *executorv1.ListPortsRequest) (*executorv1.ListPortsResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := s.svc.ListPorts(ctx, account, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return &executorv1.ListPortsResponse{Ports: ps}, nil
}

// ClosePort closes an exposed port.
func (s *Server) ClosePort(ctx context.Context, req *executorv1.ClosePortRequest) (*executorv1.ClosePortResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.svc.ClosePort(ctx, account, req.GetSandboxId(), req.GetPort()); err != nil {
		return nil, err
	}
	return &executorv1.ClosePortResponse{}, nil
}

// ConnectPort carries one connection to an exposed port: an empty message
// once connected, then bytes both ways.
func (s *Server) ConnectPort(stream executorv1.ExecutorService_ConnectPortServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	conn, release, err := s.svc.ConnectPort(ctx, account, first.GetSandboxId(), first.GetPort(), first.GetPublic())
	if err != nil {
		return err
	}
	defer release()
	if err := stream.Send(&executorv1.ConnectPortResponse{}); err != nil {
		return err
	}
	go func() {
		data := first.GetData()
		for {
			if len(data) > 0 {
				if _, err := conn.Write(data); err != nil {
					_ = conn.Close()
					return
				}
			}
			m, err := stream.Recv()
			if err != nil {
				// The client is done sending: the port reads its end.
				if cw, ok := conn.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				return
			}
			data = m.GetData()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if serr := stream.Send(&executorv1.ConnectPortResponse{Data: buf[:n]}); serr != nil {
				return nil
			}
		}
		if err != nil {
			return nil
		}
	}
}
