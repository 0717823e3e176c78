package image_test

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/conch-sh/conch/services/internal/image"
)

func TestPull(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	port := strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port)
	rt := srv.Client().Transport

	img := appImage(t)
	ref, err := name.ParseReference(host + "/team/app:1.2")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(t.Context()), remote.WithTransport(rt)); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := flatten(t, img, roomy)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		ref      string
		allowed  []string
		insecure []string
		rt       http.RoundTripper
		refusal  string // the refusal's whole message
		fails    string // what an error that is no refusal says
	}{
		{name: "by tag", ref: host + "/team/app:1.2", allowed: []string{host}, insecure: []string{host}, rt: rt},
		{name: "by digest", ref: host + "/team/app@" + digest.String(), allowed: []string{"other.example", host}, insecure: []string{host}, rt: rt},
		{name: "registry named in another case", ref: "LOCALHOST:" + port + "/team/app:1.2",
			allowed: []string{"localhost:" + port}, insecure: []string{"Localhost:" + port}, rt: rt},
		{name: "registry not allowed", ref: host + "/team/app:1.2", allowed: []string{"registry.example.com"}, insecure: []string{host}, rt: rt,
			refusal: "template: registry " + host + " is not one the operator allows templates from"},
		{name: "Docker Hub by default", ref: "team/app:1.2", allowed: []string{host}, rt: rt,
			refusal: "template: registry index.docker.io is not one the operator allows templates from"},
		{name: "plain http not allowed", ref: host + "/team/app:1.2", allowed: []string{host}, rt: rt,
			fails: "plain http to " + host + " is not allowed"},
		{name: "no transport", ref: host + "/team/app:1.2", allowed: []string{host}, insecure: []string{host},
			fails: "pull needs a transport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pulled, err := image.Pull(t.Context(), tt.ref, tt.allowed, tt.insecure, tt.rt)
			switch {
			case tt.refusal != "":
				if !errors.Is(err, image.ErrRefused) || err.Error() != tt.refusal {
					t.Fatalf("Pull = %v, want the refusal %q", err, tt.refusal)
				}
				return
			case tt.fails != "":
				if err == nil || errors.Is(err, image.ErrRefused) || !strings.Contains(err.Error(), tt.fails) {
					t.Fatalf("Pull = %v, want an error that is not a refusal saying %q", err, tt.fails)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			root, _, err := flatten(t, pulled, roomy)
			if err != nil {
				t.Fatal(err)
			}
			if root.Digest != want.Digest {
				t.Errorf("pulled root %s, want the pushed image's %s", root.Digest, want.Digest)
			}
		})
	}
}
