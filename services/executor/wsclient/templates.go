package wsclient

import (
	"context"
	"errors"
	"io"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Templates is the accounts' templates over the template service's gRPC
// API.
type Templates struct {
	c workspacev1.TemplateServiceClient
}

// NewTemplates returns the templates over c.
func NewTemplates(c workspacev1.TemplateServiceClient) *Templates {
	return &Templates{c: c}
}

// Get returns account's template name.
func (c *Templates) Get(ctx context.Context, account, name string) (*workspacev1.Template, error) {
	resp, err := c.c.GetTemplate(scoped(ctx, account, ""), &workspacev1.GetTemplateRequest{Name: name})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return resp.GetTemplate(), nil
}

// OpenRoot opens the root archive of account's template name at digest
// (a templatecache.Source).
func (c *Templates) OpenRoot(ctx context.Context, account, name, digest string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(scoped(ctx, account, ""))
	stream, err := c.c.ReadTemplateRoot(ctx, &workspacev1.ReadTemplateRootRequest{Name: name, Digest: digest})
	if err != nil {
		cancel()
		return nil, errs.FromStatus(err)
	}
	return &streamReader{recv: func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	}, cancel: cancel, left: -1}, nil
}

// streamReader reads the data of a server stream's messages. With left
// set (not -1) it fails unless it gets exactly that many bytes: the size
// the stream's record says.
type streamReader struct {
	recv   func() ([]byte, error)
	cancel context.CancelFunc
	buf    []byte
	left   int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		b, err := r.recv()
		if errors.Is(err, io.EOF) {
			if r.left > 0 {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, io.EOF
		}
		if err != nil {
			return 0, errs.FromStatus(err)
		}
		if r.left >= 0 {
			if int64(len(b)) > r.left {
				return 0, errors.New("wsclient: stream longer than its record says")
			}
			r.left -= int64(len(b))
		}
		r.buf = b
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *streamReader) Close() error {
	r.cancel()
	return nil
}
