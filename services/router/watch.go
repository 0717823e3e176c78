package router

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/apierror"
)

// watchKeepAlive is how often an idle watch sends a comment, so that
// proxies between it and the client keep the connection.
const watchKeepAlive = 25 * time.Second

// watchRoutes serves GET /api/v1/sandboxes/{id}/watch?path=&recursive=:
// the changes under a directory of the sandbox as server-sent events —
// ready once the watch holds, then a change ({"path", "op"}) for each
// path created, written, removed or renamed, and coalesced
// ({"dropped"} or {"overflow": true}) where a flood left some out.
type watchRoutes struct {
	exec executorv1.ExecutorServiceClient
	log  *slog.Logger
}

func (t *watchRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("GET /api/v1/sandboxes/{sandbox_id}/watch", auth(http.HandlerFunc(t.serve)))
}

func (t *watchRoutes) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	recursive := false
	if s := q.Get("recursive"); s != "" {
		var err error
		if recursive, err = strconv.ParseBool(s); err != nil {
			apiErrors(w, errs.Invalid("recursive", "must be true or false"))
			return
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := t.exec.WatchFiles(ctx, &executorv1.WatchFilesRequest{SandboxId: r.PathValue("sandbox_id"), Path: q.Get("path"), Recursive: recursive})
	if err != nil {
		apierror.Write(ctx, t.log, w, err)
		return
	}
	type recv struct {
		m   *executorv1.WatchFilesResponse
		err error
	}
	msgs := make(chan recv)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case msgs <- recv{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
	keep := time.NewTicker(watchKeepAlive)
	defer keep.Stop()
	for ev.err == nil {
		select {
		case <-keep.C:
			if ev.started {
				ev.comment("keep-alive")
			}
		case x := <-msgs:
			if x.err != nil {
				if !ev.started {
					// Nothing sent yet: the answer is the API's error.
					apierror.Write(ctx, t.log, w, x.err)
					return
				}
				if !errors.Is(x.err, io.EOF) && ctx.Err() == nil {
					ev.sendError(x.err)
				}
				return
			}
			switch m := x.m; m.GetOp() {
			case "ready":
				ev.send("ready", map[string]any{"path": m.GetPath()})
			case "coalesced":
				if m.GetOverflow() {
					ev.send("coalesced", map[string]any{"overflow": true})
				} else {
					ev.send("coalesced", map[string]any{"dropped": m.GetDropped()})
				}
			default:
				ev.send("change", map[string]any{"path": m.GetPath(), "op": m.GetOp()})
			}
		case <-ctx.Done():
			return
		}
	}
}
