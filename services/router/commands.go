package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/utf8stream"
	"github.com/conch-sh/conch/services/router/apierror"
)

// maxCommandBody bounds a command's JSON: the command's own bound and room
// for its other fields and escaping.
const maxCommandBody = 2*contract.MaxCommandBytes + 64<<10

// commandRoutes serves POST /api/v1/sandboxes/{id}/commands: with
// "stream": true as server-sent events of its output as it comes, which
// grpc-gateway cannot; otherwise through the gateway, as RunCommand.
type commandRoutes struct {
	exec executorv1.ExecutorServiceClient
	gw   http.Handler
	log  *slog.Logger
}

func (c *commandRoutes) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("POST /api/v1/sandboxes/{sandbox_id}/commands", auth(http.HandlerFunc(c.serve)))
}

func (c *commandRoutes) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCommandBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			apiErrors(w, errs.NewReason(errs.ResourceExhausted, errs.ReasonRequestTooLarge, "request body is larger than %d bytes", maxCommandBody))
			return
		}
		apiErrors(w, errs.New(errs.InvalidArgument, "reading the request body failed: %v", err))
		return
	}
	var probe struct {
		Stream json.RawMessage `json:"stream"`
	}
	if json.Unmarshal(body, &probe) != nil || !bytes.Equal(bytes.TrimSpace(probe.Stream), []byte("true")) {
		// Not a stream (or not JSON: the gateway says why).
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		c.gw.ServeHTTP(w, r)
		return
	}
	req := &executorv1.RunCommandRequest{}
	if err := restjson.New().Unmarshal(body, req); err != nil {
		apiErrors(w, errs.New(errs.InvalidArgument, "%v", err))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stream, err := c.exec.StreamCommand(ctx, &executorv1.StreamCommandRequest{
		SandboxId: r.PathValue("sandbox_id"), Command: req.GetCommand(), TimeoutSeconds: req.GetTimeoutSeconds(),
		MaxOutputLength: req.GetMaxOutputLength(), Workdir: req.GetWorkdir(), Env: req.GetEnv(),
	})
	if err != nil {
		apierror.Write(ctx, c.log, w, err)
		return
	}
	ev := &eventWriter{w: w, rc: http.NewResponseController(w)}
	var text [2]utf8stream.Splitter
	for {
		m, err := stream.Recv()
		if err != nil {
			if !ev.started {
				// Nothing sent yet: the answer is the API's error.
				apierror.Write(ctx, c.log, w, err)
				return
			}
			if !errors.Is(err, io.EOF) {
				ev.sendError(err)
			}
			return
		}
		switch e := m.GetEvent().GetEvent().(type) {
		case *executorv1.ExecResponse_Output:
			i, name := 0, "stdout"
			if e.Output.GetStream() == executorv1.StreamName_STREAM_NAME_STDERR {
				i, name = 1, "stderr"
			}
			for _, d := range text[i].Split(e.Output.GetData()) {
				ev.send(name, d)
			}
		case *executorv1.ExecResponse_ApprovalPending:
			a, _ := restjson.New().Marshal(e.ApprovalPending.GetApproval())
			ev.send("approval", json.RawMessage(a))
		case *executorv1.ExecResponse_Finished:
			for i, name := range []string{"stdout", "stderr"} {
				for _, d := range text[i].Flush() {
					ev.send(name, d)
				}
			}
			ev.send("exit", exitEvent(e.Finished))
			return
		}
		if ev.err != nil {
			return // the client went away; the deferred cancel kills the command
		}
	}
}

// exitEvent is the last event of a streamed command.
func exitEvent(f *executorv1.Finished) map[string]any {
	out := map[string]any{
		"timed_out":        f.GetOutcome().GetType() == executorv1.OutcomeType_OUTCOME_TYPE_TIMEOUT,
		"stdout_truncated": f.GetStdoutTruncated(),
		"stderr_truncated": f.GetStderrTruncated(),
		"duration_ms":      f.GetDurationMs(),
	}
	switch f.GetOutcome().GetType() {
	case executorv1.OutcomeType_OUTCOME_TYPE_EXIT:
		out["exit_code"] = f.GetOutcome().GetExitCode()
	case executorv1.OutcomeType_OUTCOME_TYPE_ERROR:
		out["error"] = f.GetError()
	}
	return out
}

// eventWriter writes server-sent events, the headers before the first.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	err     error
}

func (e *eventWriter) send(name string, data any) {
	if e.err != nil {
		return
	}
	e.start()
	b, err := json.Marshal(data)
	if err != nil {
		e.err = err
		return
	}
	if _, e.err = io.WriteString(e.w, "event: "+name+"\ndata: "+string(b)+"\n\n"); e.err == nil {
		e.err = e.rc.Flush()
	}
}

// sendError sends err as the stream's last event, in the API's error
// envelope: once a stream has begun, its status cannot say it.
func (e *eventWriter) sendError(err error) {
	a := errs.Public(err)
	e.send("error", map[string]any{"error": apierror.Object{Type: a.Type, Code: a.Code, Message: a.Message}})
}

// start writes the headers, once.
func (e *eventWriter) start() {
	if e.started {
		return
	}
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
	e.started = true
}

// comment writes a comment line, which clients ignore: it keeps an idle
// stream's connection.
func (e *eventWriter) comment(text string) {
	if e.err != nil {
		return
	}
	e.start()
	if _, e.err = io.WriteString(e.w, ": "+text+"\n\n"); e.err == nil {
		e.err = e.rc.Flush()
	}
}
