package image

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	// maxMetadataBytes bounds each JSON document of an image (manifest.json,
	// index.json, oci-layout, manifests, configs): go-containerregistry reads
	// them whole into memory.
	maxMetadataBytes = 4 << 20
	// maxLayers bounds an image's layers. The docker archive reader scans the
	// whole archive for each one, and overlayfs stops near 128 anyway.
	maxLayers = 256
	// maxMembers bounds the entries of an archive, which Open lists.
	maxMembers = 1 << 16
)

var blobName = regexp.MustCompile(`^blobs/sha256/[0-9a-f]{64}$`)

// Open reads an image archive on local disk: a docker or podman save archive
// (manifest.json at the top) or an OCI image layout packed as a tar
// (oci-layout, index.json and blobs/). It needs the archive whole, for
// random access. The archive must hold exactly one image, or among several
// exactly one for linux/GOARCH, made for that platform; anything else is
// refused.
//
// An OCI layout's index.json, oci-layout and blobs/sha256/<hex> files, and
// nothing else, are copied into a new directory under tmpDir, which cleanup
// removes once the image has been read. cleanup is nil when err is not.
func Open(ctx context.Context, archive, tmpDir string) (img v1.Image, cleanup func() error, err error) {
	members, err := listMembers(archive)
	if err != nil {
		return nil, nil, err
	}
	_, docker := members["manifest.json"]
	_, oci := members["oci-layout"]
	switch {
	case docker:
		// docker save writes an OCI layout beside manifest.json since
		// Docker 25; manifest.json is in every docker archive.
		if img, err = openDocker(archive, members); err != nil {
			return nil, nil, err
		}
		return img, func() error { return nil }, nil
	case oci:
		return openLayout(ctx, archive, tmpDir)
	}
	return nil, nil, refuse("", "not an image archive: it holds neither manifest.json (docker save) nor oci-layout (an OCI image layout)")
}

// member is an archive's entry, as go-containerregistry's docker archive
// reader finds it: the first one with its cleaned name.
type member struct {
	typ  byte
	size int64
}

func listMembers(archive string) (map[string]member, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("image: open: %w", err)
	}
	defer f.Close()
	members := map[string]member{}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return members, nil
		}
		if err != nil {
			return nil, archiveError(err)
		}
		if n == maxMembers {
			return nil, refuse("", "archive has more than %d entries", maxMembers)
		}
		name := path.Clean(hdr.Name)
		if _, ok := members[name]; !ok {
			members[name] = member{typ: hdr.Typeflag, size: hdr.Size}
		}
	}
}

// archiveError tells a tar the tenant broke from a disk that failed.
func archiveError(err error) error {
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
		return refuse("", "not a readable tar archive (%v); upload the uncompressed output of docker save, podman save or an OCI layout", err)
	}
	return fmt.Errorf("image: read archive: %w", err)
}

func openDocker(archive string, members map[string]member) (v1.Image, error) {
	if err := document("manifest.json", members); err != nil {
		return nil, err
	}
	opener := func() (io.ReadCloser, error) { return os.Open(archive) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, refuse("manifest.json", "unreadable: %v", err)
	}
	if len(m) != 1 {
		return nil, refuse("", "archive holds %d images; a template is made from exactly one", len(m))
	}
	if len(m[0].Layers) > maxLayers {
		return nil, refuse("", "image has %d layers, more than the limit of %d", len(m[0].Layers), maxLayers)
	}
	cfgName := path.Clean(m[0].Config)
	if err := document(cfgName, members); err != nil {
		return nil, err
	}
	img, err := tarball.Image(opener, nil)
	if err != nil {
		return nil, refuse("", "unreadable docker archive: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, refuse(cfgName, "unreadable image config: %v", err)
	}
	if err := checkPlatform(cf); err != nil {
		return nil, err
	}
	return img, nil
}

// document refuses a docker archive's JSON document that is missing or not
// small.
func document(name string, members map[string]member) error {
	m, ok := members[name]
	if !ok {
		return refuse(name, "missing from the archive")
	}
	return small(name, m)
}

// small refuses a JSON document that is not a regular file or is too large
// to read into memory.
func small(name string, m member) error {
	switch {
	case m.typ != tar.TypeReg:
		return refuse(name, "must be a regular file")
	case m.size > maxMetadataBytes:
		return refuse(name, "larger than %s", FormatBytes(maxMetadataBytes))
	}
	return nil
}

// checkPlatform refuses an image made for another platform than the one
// templates run on; an image that names none is taken at its word.
func checkPlatform(cf *v1.ConfigFile) error {
	if (cf.OS != "" && cf.OS != "linux") || (cf.Architecture != "" && cf.Architecture != runtime.GOARCH) {
		return refuse("", "image is for %s/%s; templates run on linux/%s", printable(cf.OS), printable(cf.Architecture), runtime.GOARCH)
	}
	return nil
}

func openLayout(ctx context.Context, archive, tmpDir string) (v1.Image, func() error, error) {
	dir, err := os.MkdirTemp(tmpDir, "layout-")
	if err != nil {
		return nil, nil, fmt.Errorf("image: open: %w", err)
	}
	cleanup := func() error { return os.RemoveAll(dir) }
	img, err := readLayout(ctx, archive, dir)
	if err != nil {
		return nil, nil, errors.Join(err, cleanup())
	}
	return img, cleanup, nil
}

func readLayout(ctx context.Context, archive, dir string) (v1.Image, error) {
	blobs, err := unpackLayout(ctx, archive, dir)
	if err != nil {
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, refuse("", "unreadable OCI image layout: %v", err)
	}
	img, err := chooseImage(idx, blobs)
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, refuse("", "unreadable image manifest: %v", err)
	}
	if len(m.Layers) > maxLayers {
		return nil, refuse("", "image has %d layers, more than the limit of %d", len(m.Layers), maxLayers)
	}
	if err := blobs.small(m.Config.Digest); err != nil {
		return nil, err
	}
	for _, l := range m.Layers {
		// Refused now rather than half way through Flatten; a foreign
		// layer, fetched from elsewhere, is missing too.
		if _, ok := blobs[l.Digest]; !ok {
			return nil, refuse("blobs/"+l.Digest.Algorithm+"/"+l.Digest.Hex, "layer missing from the archive")
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, refuse("", "unreadable image config: %v", err)
	}
	if err := checkPlatform(cf); err != nil {
		return nil, err
	}
	return img, nil
}

// blobSizes holds the size of each blob unpacked from a layout.
type blobSizes map[v1.Hash]int64

// small refuses a blob that is missing or too large to read into memory.
func (b blobSizes) small(h v1.Hash) error {
	name := "blobs/" + h.Algorithm + "/" + h.Hex
	size, ok := b[h]
	if !ok {
		return refuse(name, "missing from the archive")
	}
	return small(name, member{typ: tar.TypeReg, size: size})
}

// unpackLayout copies a layout's index.json, oci-layout and blobs into dir
// and checks each blob's bytes against its name. What it writes is bounded
// by the archive's own size.
func unpackLayout(ctx context.Context, archive, dir string) (blobSizes, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("image: open: %w", err)
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("image: open: %w", err)
	}
	defer root.Close()
	if err := root.MkdirAll("blobs/sha256", 0o700); err != nil {
		return nil, fmt.Errorf("image: open: %w", err)
	}
	blobs := blobSizes{}
	seen := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, archiveError(err)
		}
		name := path.Clean(hdr.Name)
		isBlob := blobName.MatchString(name)
		if !isBlob && name != "index.json" && name != "oci-layout" {
			continue
		}
		if seen[name] {
			return nil, refuse(name, "appears twice in the archive")
		}
		seen[name] = true
		if !isBlob {
			if err := small(name, member{typ: hdr.Typeflag, size: hdr.Size}); err != nil {
				return nil, err
			}
		} else if hdr.Typeflag != tar.TypeReg {
			return nil, refuse(name, "must be a regular file")
		}
		sum, err := copyMember(root, name, tr, hdr.Size)
		if err != nil {
			return nil, err
		}
		if isBlob {
			h := v1.Hash{Algorithm: "sha256", Hex: path.Base(name)}
			if sum != h.Hex {
				return nil, refuse(name, "content does not match its digest")
			}
			blobs[h] = hdr.Size
		}
	}
	for _, name := range []string{"oci-layout", "index.json"} {
		if !seen[name] {
			return nil, refuse(name, "missing from the archive")
		}
	}
	return blobs, nil
}

// copyMember writes a member under root and returns the hex sha256 of its
// bytes.
func copyMember(root *os.Root, name string, r io.Reader, size int64) (string, error) {
	w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("image: unpack %s: %w", name, err)
	}
	h := sha256.New()
	_, err = io.CopyN(io.MultiWriter(w, h), r, size)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("image: unpack %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// chooseImage picks an index's one image, looking into nested indexes,
// or among several the one for linux/GOARCH. Manifests that are not images
// are passed over; attestations, being images for unknown/unknown, drop out
// with the other platforms.
func chooseImage(idx v1.ImageIndex, blobs blobSizes) (v1.Image, error) {
	type found struct {
		idx  v1.ImageIndex
		desc v1.Descriptor
	}
	var images []found
	// An index may name another twice; each is read once, or a chain of
	// them would be read exponentially often.
	seen := map[v1.Hash]bool{}
	var collect func(idx v1.ImageIndex) error
	collect = func(idx v1.ImageIndex) error {
		im, err := idx.IndexManifest()
		if err != nil {
			return refuse("", "unreadable image index: %v", err)
		}
		for _, d := range im.Manifests {
			switch {
			case d.MediaType.IsImage():
				images = append(images, found{idx, d})
			case d.MediaType.IsIndex() && !seen[d.Digest]:
				// Blobs are checked against their digests, so an index
				// cannot hold itself: the descent ends.
				seen[d.Digest] = true
				if err := blobs.small(d.Digest); err != nil {
					return err
				}
				child, err := idx.ImageIndex(d.Digest)
				if err != nil {
					return refuse("", "unreadable image index: %v", err)
				}
				if err := collect(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := collect(idx); err != nil {
		return nil, err
	}
	all := len(images)
	if all > 1 {
		images = slices.DeleteFunc(images, func(f found) bool {
			p := f.desc.Platform
			return p == nil || p.OS != "linux" || p.Architecture != runtime.GOARCH
		})
	}
	switch {
	case all == 0:
		return nil, refuse("", "archive holds no image")
	case len(images) != 1:
		return nil, refuse("", "archive holds %d images, %d of them for linux/%s; a template is made from exactly one", all, len(images), runtime.GOARCH)
	}
	f := images[0]
	if err := blobs.small(f.desc.Digest); err != nil {
		return nil, err
	}
	img, err := f.idx.Image(f.desc.Digest)
	if err != nil {
		return nil, refuse("", "unreadable image manifest: %v", err)
	}
	return img, nil
}
