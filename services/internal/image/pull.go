package image

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pull fetches ref ("registry.example.com/team/app:1.2", or pinned with
// @sha256:<hex>) for linux/GOARCH, refusing it unless its registry (host or
// host:port, as the reference names it; "index.docker.io" for a bare
// Docker Hub name) is in allowed, matched without regard to case. Every
// request goes through rt, which conch gives a dialer that keeps to the
// addresses the operator allows, and over https, save to the registries in
// insecure. The layers are fetched, under ctx, only when read.
func Pull(ctx context.Context, ref string, allowed, insecure []string, rt http.RoundTripper) (v1.Image, error) {
	if rt == nil {
		return nil, errors.New("image: pull needs a transport")
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, refuse("", "not an image reference: %v", err)
	}
	registry := r.Context().RegistryStr()
	if !containsFold(allowed, registry) {
		return nil, refuse("", "registry %s is not one the operator allows templates from", printable(registry))
	}
	if containsFold(insecure, registry) {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, refuse("", "not an image reference: %v", err)
		}
	}
	img, err := remote.Image(r,
		remote.WithContext(ctx),
		remote.WithTransport(&httpsOnly{next: rt, insecure: insecure}),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, fmt.Errorf("image: pull %s: %w", printable(ref), err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("image: pull %s: %w", printable(ref), err)
	}
	if len(m.Layers) > maxLayers {
		return nil, refuse("", "image has %d layers, more than the limit of %d", len(m.Layers), maxLayers)
	}
	if m.Config.Size > maxMetadataBytes {
		return nil, refuse("", "image config is larger than %s", FormatBytes(maxMetadataBytes))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: pull %s: config: %w", printable(ref), err)
	}
	if err := checkPlatform(cf); err != nil {
		return nil, err
	}
	return img, nil
}

// httpsOnly refuses plain http to any host but the insecure registries:
// go-containerregistry falls back to http on its own for loopback and
// private addresses.
type httpsOnly struct {
	next     http.RoundTripper
	insecure []string
}

func (t *httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !containsFold(t.insecure, req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("image: plain %s to %s is not allowed (the operator names the registries that may use it)", req.URL.Scheme, req.URL.Host)
	}
	return t.next.RoundTrip(req)
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}

// CheckReference checks, without reaching anything, that ref is an image
// reference whose registry is in allowed: what Pull refuses at once.
func CheckReference(ref string, allowed []string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return refuse("", "not an image reference: %v", err)
	}
	if registry := r.Context().RegistryStr(); !containsFold(allowed, registry) {
		return refuse("", "registry %s is not one the operator allows templates from", printable(registry))
	}
	return nil
}
