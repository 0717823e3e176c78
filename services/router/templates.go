package router

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/protobuf/proto"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/router/apierror"
)

// MaxTemplateImageBytes bounds an image archive's upload at the router;
// the workspace service holds each to its own, lower, --max-template-bytes.
const MaxTemplateImageBytes = 64 << 30

// templateRoutes serves the template route grpc-gateway cannot: the
// streamed upload of an image archive.
type templateRoutes struct {
	t    workspacev1.TemplateServiceClient
	log  *slog.Logger
	idle time.Duration
}

func (t *templateRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("PUT /api/v1/templates/{name}/image", auth(http.HandlerFunc(t.putImage)))
}

// putImage streams an image archive to the template service and answers
// the template once it is built, or why it was refused.
func (t *templateRoutes) putImage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var stream workspacev1.TemplateService_PutTemplateImageClient
	resp, ok := streamBody(w, r, cancel, body{max: MaxTemplateImageBytes, idle: t.idle, fail: t.fail},
		func() error {
			var err error
			if stream, err = t.t.PutTemplateImage(ctx, chunks.CallOption()); err != nil {
				return err
			}
			return stream.Send(&workspacev1.PutTemplateImageRequest{Message: &workspacev1.PutTemplateImageRequest_Name{Name: r.PathValue("name")}})
		},
		func(b []byte) error {
			return stream.Send(&workspacev1.PutTemplateImageRequest{Message: &workspacev1.PutTemplateImageRequest_Data{Data: b}})
		},
		func() (proto.Message, error) {
			resp, err := stream.CloseAndRecv()
			return resp.GetTemplate(), err
		})
	if ok {
		writeProto(w, r, t.fail, resp)
	}
}

func (t *templateRoutes) fail(w http.ResponseWriter, r *http.Request, err error) {
	apierror.Write(r.Context(), t.log, w, err)
}
