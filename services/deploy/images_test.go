package deploy

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
)

// thirdPartyImages are images conch does not build; the operator maps them
// to their registry's copy of the upstream release.
var thirdPartyImages = map[string]bool{"etcd": true, "minio/minio": true}

// builtImages are the image names make images tags.
func builtImages(t *testing.T) map[string]bool {
	t.Helper()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\(IMAGE_BUILD\) [^\n]*-t ([a-z0-9./_-]+):\$\(IMAGE_TAG\)`).FindAllStringSubmatch(string(makefile), -1) {
		built[m[1]] = true
	}
	return built
}

func TestManifestImagesAreBuilt(t *testing.T) {
	built := builtImages(t)
	for _, name := range []string{"conch", "conch-executor", "conch-sandbox", "conch-minio"} {
		if !built[name] {
			t.Errorf("make images does not build %s", name)
		}
	}
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads {
			for _, c := range w.containers() {
				name := imageName(c.Image)
				if !built[path.Base(name)] && !thirdPartyImages[name] {
					t.Errorf("%s container %s: image %s is neither built by make images nor a known third-party image", w, c.Name, c.Image)
				}
			}
		}
	})
}

func TestDockerfileMatchesTheToolchain(t *testing.T) {
	t.Parallel()
	work, err := os.ReadFile("../../go.work")
	if err != nil {
		t.Fatal(err)
	}
	want := submatch(`(?m)^go (\S+)$`, work)
	for _, df := range []string{"../../Dockerfile", "../../deploy/minio/Dockerfile"} {
		docker, err := os.ReadFile(df)
		if err != nil {
			t.Fatal(err)
		}
		if got := submatch(`(?m)^ARG GO_VERSION=(\S+)$`, docker); want == "" || got != want {
			t.Errorf("%s builds with Go %q, go.work asks for %q", df, got, want)
		}
	}
	// Files the images copy from the repository must exist.
	for _, df := range []string{"../../Dockerfile", "../../deploy/sandbox/Dockerfile", "../../deploy/minio/Dockerfile"} {
		b, err := os.ReadFile(df)
		if err != nil {
			t.Fatal(err)
		}
		ctx := path.Dir(strings.TrimPrefix(df, "../../"))
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "COPY" || strings.HasPrefix(f[1], "--from") {
				continue
			}
			for _, src := range f[1 : len(f)-1] {
				if _, err := os.Stat(path.Join("../..", ctx, src)); err != nil {
					t.Errorf("%s: COPY %s: %v", df, src, err)
				}
			}
		}
	}
}

// submatch returns the first group of re in b, or "".
func submatch(re string, b []byte) string {
	m := regexp.MustCompile(re).FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}
