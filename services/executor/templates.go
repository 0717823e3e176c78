package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/templatecache"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Templates reads an account's templates: the workspace service.
type Templates interface {
	Get(ctx context.Context, account, name string) (*workspacev1.Template, error)
	templatecache.Source
}

// WithTemplates starts sandboxes from the account's templates, keeping
// their roots in cache.
func WithTemplates(t Templates, cache *templatecache.Cache) Option {
	return func(s *Service) { s.templates, s.templateRoots = t, cache }
}

// WithReadyTimeout bounds the polling of a template's ready command
// (DefaultReadyTimeout).
func WithReadyTimeout(d time.Duration) Option { return func(s *Service) { s.readyTimeout = d } }

// DefaultReadyTimeout bounds the polling of a template's ready command.
const DefaultReadyTimeout = 2 * time.Minute

// readyPoll is how often a ready command is run until it succeeds.
const readyPoll = 250 * time.Millisecond

// usedTemplate is what a sandbox took from its template.
type usedTemplate struct {
	t       *workspacev1.Template
	image   *sandbox.ImageRoot // nil: the executor's own root
	release func()             // frees the cached root
}

// useTemplate reads p's template and fetches its root, and puts its
// environment and PATH into p: what the exec policy judges and what runs
// come from the same params.
func (s *Service) useTemplate(ctx context.Context, account string, p *CreateParams) (*usedTemplate, error) {
	if p.Template == "" {
		return nil, nil
	}
	if s.templates == nil {
		return nil, errs.New(errs.FailedPrecondition, "template: this executor is not connected to the template service")
	}
	t, err := s.templates.Get(ctx, account, p.Template)
	if err != nil {
		return nil, err
	}
	switch t.GetStatus() {
	case workspacev1.TemplateStatus_TEMPLATE_STATUS_READY:
	case workspacev1.TemplateStatus_TEMPLATE_STATUS_BUILDING:
		return nil, errs.New(errs.FailedPrecondition, "template %q is still building; try again once it is ready", p.Template)
	default:
		return nil, errs.New(errs.FailedPrecondition, "template %q failed to build: %s", p.Template, t.GetError())
	}
	u := &usedTemplate{t: t, release: func() {}}
	if t.GetDigest() != "" {
		if s.templateRoots == nil {
			return nil, errs.New(errs.FailedPrecondition, "template: this executor keeps no template roots (--template-cache-dir)")
		}
		dir, release, err := s.templateRoots.Root(ctx, account, p.Template, t.GetDigest())
		if err != nil {
			return nil, fmt.Errorf("executor: template %s: %w", p.Template, err)
		}
		u.image, u.release = &sandbox.ImageRoot{Dir: dir}, release
	}
	p.Workdir = t.GetWorkdir()
	if u.image == nil && sandbox.OwnWorkdir(p.Workdir) {
		u.release()
		return nil, errs.New(errs.FailedPrecondition, "template %q: its workdir %s is outside /home/workspace and /tmp, which needs an image; push one (conch templates push)", p.Template, p.Workdir)
	}
	p.Env = maps.Clone(t.GetEnv())
	if path, ok := p.Env["PATH"]; ok {
		delete(p.Env, "PATH")
		p.PathPrepend = append(templatePath(path, p.PathPrepend), p.PathPrepend...)
	}
	return u, nil
}

// templatePath is the directories of an image's PATH neither the
// sandbox's own PATH nor prepend has, in order.
func templatePath(path string, prepend []string) []string {
	own := sandbox.CommandPath(nil)
	var out []string
	for _, d := range strings.Split(path, ":") {
		if strings.HasPrefix(d, "/") && !slices.Contains(own, d) && !slices.Contains(out, d) && !slices.Contains(prepend, d) && checkPathPrepend("template PATH", []string{d}) == nil {
			out = append(out, d)
		}
	}
	return out
}

// startTemplate runs a new sandbox's start command in the background and
// then its ready command until it exits 0, within its timeout.
func (s *Service) startTemplate(ctx context.Context, e *entry, t *workspacev1.Template) error {
	if c := t.GetStartCommand(); c != "" {
		// Its output is dropped inside the sandbox: nothing waits for
		// it, and it lives as long as the sandbox.
		if _, err := e.sb.Start(sandbox.Options{Command: c, Budget: 0, OnOutput: func(sandbox.Stream, []byte) {}}); err != nil {
			return fmt.Errorf("executor: template %s: start command: %w", t.GetName(), err)
		}
	}
	c := t.GetReadyCommand()
	if c == "" {
		return nil
	}
	timeout := cmp.Or(s.readyTimeout, DefaultReadyTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		stderr := head(1 << 10)
		p, err := e.sb.Start(sandbox.Options{Command: c, Budget: 4 << 10, OnOutput: func(st sandbox.Stream, b []byte) {
			if st == sandbox.Stderr {
				stderr.write(b)
			}
		}})
		if err != nil {
			return fmt.Errorf("executor: template %s: ready command: %w", t.GetName(), err)
		}
		select {
		case <-p.Done():
		case <-ctx.Done():
			_ = p.Kill()
			<-p.Done()
		}
		last := p.Exit()
		if last.Err == nil && last.Code == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("the template's ready command did not succeed within %v (last exit %d", timeout, last.Code)
			if s := strings.TrimSpace(stderr.String()); s != "" {
				msg += ": " + s
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return errs.New(errs.FailedPrecondition, "%s)", msg)
			}
			return ctx.Err()
		case <-time.After(readyPoll):
		}
	}
}
