package workspace

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/workspace/templates"
)

// TemplateServer is the template service: the gRPC face of package
// templates.
type TemplateServer struct {
	workspacev1.UnsafeTemplateServiceServer
	t *templates.Store
}

var _ workspacev1.TemplateServiceServer = (*TemplateServer)(nil)

// NewTemplates returns the template service over t.
func NewTemplates(t *templates.Store) (*TemplateServer, error) {
	if t == nil {
		return nil, errors.New("workspace: templates are required")
	}
	return &TemplateServer{t: t}, nil
}

// Register registers the service's gRPC handlers on g.
func (s *TemplateServer) Register(g *grpc.Server) {
	workspacev1.RegisterTemplateServiceServer(g, s)
}

// CreateTemplate makes a template.
func (s *TemplateServer) CreateTemplate(ctx context.Context, req *workspacev1.CreateTemplateRequest) (*workspacev1.CreateTemplateResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := s.t.Create(ctx, account, templates.Record{
		Name: req.GetName(), Image: req.GetImage(), StartCommand: req.GetStartCommand(), ReadyCommand: req.GetReadyCommand(),
		Env: req.GetEnv(), Workdir: req.GetWorkdir(),
	})
	if err != nil {
		return nil, err
	}
	return &workspacev1.CreateTemplateResponse{Template: templatePB(rec)}, nil
}

// PutTemplateImage builds a template's image from the archive streamed
// after its name.
func (s *TemplateServer) PutTemplateImage(stream workspacev1.TemplateService_PutTemplateImageServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	name, ok := first.GetMessage().(*workspacev1.PutTemplateImageRequest_Name)
	if !ok {
		return errs.New(errs.InvalidArgument, "the first message of PutTemplateImage must be the template's name")
	}
	m := new(workspacev1.PutTemplateImageRequest)
	r := &dataReader{recv: func() ([]byte, error) {
		if err := stream.RecvMsg(m); err != nil {
			return nil, err
		}
		if _, ok := m.GetMessage().(*workspacev1.PutTemplateImageRequest_Data); !ok {
			return nil, errs.New(errs.InvalidArgument, "after the name, PutTemplateImage takes only data messages")
		}
		return m.GetData(), nil
	}}
	rec, err := s.t.PutImage(ctx, account, name.Name, r)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&workspacev1.PutTemplateImageResponse{Template: templatePB(rec)})
}

// GetTemplate returns a template.
func (s *TemplateServer) GetTemplate(ctx context.Context, req *workspacev1.GetTemplateRequest) (*workspacev1.GetTemplateResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := s.t.Get(ctx, account, req.GetName())
	if err != nil {
		return nil, err
	}
	return &workspacev1.GetTemplateResponse{Template: templatePB(rec)}, nil
}

// ListTemplates lists the account's templates.
func (s *TemplateServer) ListTemplates(ctx context.Context, _ *workspacev1.ListTemplatesRequest) (*workspacev1.ListTemplatesResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := s.t.List(ctx, account)
	if err != nil {
		return nil, err
	}
	out := &workspacev1.ListTemplatesResponse{Templates: make([]*workspacev1.Template, 0, len(recs))}
	for _, r := range recs {
		out.Templates = append(out.Templates, templatePB(r))
	}
	return out, nil
}

// DeleteTemplate deletes a template.
func (s *TemplateServer) DeleteTemplate(ctx context.Context, req *workspacev1.DeleteTemplateRequest) (*workspacev1.DeleteTemplateResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	deleted, err := s.t.Delete(ctx, account, req.GetName())
	if err != nil {
		return nil, err
	}
	if !deleted {
		return nil, templates.NotFound(req.GetName())
	}
	return &workspacev1.DeleteTemplateResponse{Deleted: true}, nil
}

// ReadTemplateRoot streams a ready template's root.
func (s *TemplateServer) ReadTemplateRoot(req *workspacev1.ReadTemplateRootRequest, stream workspacev1.TemplateService_ReadTemplateRootServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	rc, _, err := s.t.OpenRoot(ctx, account, req.GetName(), req.GetDigest())
	if err != nil {
		return err
	}
	defer rc.Close()
	return sendChunks(rc, func(b []byte) error {
		return stream.Send(&workspacev1.ReadTemplateRootResponse{Data: b})
	})
}

// sendChunks sends what r holds, a chunk at a time.
func sendChunks(r io.Reader, send func([]byte) error) error {
	buf := make([]byte, chunks.Size)
	for {
		n, err := chunks.Fill(r, buf)
		if n > 0 {
			if err := send(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var templateStatus = map[string]workspacev1.TemplateStatus{
	templates.Building: workspacev1.TemplateStatus_TEMPLATE_STATUS_BUILDING,
	templates.Ready:    workspacev1.TemplateStatus_TEMPLATE_STATUS_READY,
	templates.Failed:   workspacev1.TemplateStatus_TEMPLATE_STATUS_FAILED,
}

func templatePB(r templates.Record) *workspacev1.Template {
	return &workspacev1.Template{
		Name: r.Name, Image: r.Image, StartCommand: r.StartCommand, ReadyCommand: r.ReadyCommand,
		Env: r.Env, Workdir: r.Workdir, Status: templateStatus[r.Status], Error: r.Error, Warnings: r.Warnings,
		Digest: r.Digest, SizeBytes: r.Size, CreatedAt: timestamppb.New(r.Created), UpdatedAt: timestamppb.New(r.Updated),
	}
}
