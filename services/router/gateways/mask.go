package gateways

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// updatePaths checks an update mask and returns its paths with proto field
// names (camelCase segments are accepted, as everywhere in the REST API),
// and whether the update replaces the whole gateway: no mask, or "*".
func updatePaths(mask *fieldmaskpb.FieldMask) (paths []string, replace bool, err error) {
	if mask == nil {
		return nil, true, nil
	}
	for _, p := range mask.GetPaths() {
		if p == "*" {
			if len(mask.GetPaths()) > 1 {
				return nil, false, invalid("update_mask", `"*" replaces the whole gateway and cannot be combined with other paths`)
			}
			return nil, true, nil
		}
		name, err := protoPath((&routerv1.Gateway{}).ProtoReflect().Descriptor(), p)
		if err != nil {
			return nil, false, invalid("update_mask", "%q %v", p, err)
		}
		paths = append(paths, name)
	}
	return paths, false, nil
}

// protoPath resolves a dotted path in md, segment by segment, by proto or
// JSON name, and returns it with proto names. Only the last segment may be
// a list, a map or a scalar, as a FieldMask requires.
func protoPath(md protoreflect.MessageDescriptor, path string) (string, error) {
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		parent := strings.Join(segs[:i], ".")
		if md == nil {
			return "", fmt.Errorf("goes into %s, which is a value, list or map: the path must end there", parent)
		}
		fd := md.Fields().ByName(protoreflect.Name(seg))
		if fd == nil {
			fd = md.Fields().ByJSONName(seg)
		}
		if fd == nil {
			if parent == "" {
				parent = "a gateway"
			}
			return "", fmt.Errorf("is not a field path: %s has no field %q", parent, seg)
		}
		segs[i] = string(fd.Name())
		md = nil
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			md = fd.Message()
		}
	}
	return strings.Join(segs, "."), nil
}

// merged returns old with the fields of paths taken from patch: a field
// patch leaves unset is cleared, and a message, list or map is replaced
// whole. Neither argument is changed.
func merged(old, patch *routerv1.Gateway, paths []string) *routerv1.Gateway {
	out := proto.Clone(old).(*routerv1.Gateway)
	patch = proto.Clone(patch).(*routerv1.Gateway)
	for _, p := range paths {
		setPath(out.ProtoReflect(), patch.ProtoReflect(), strings.Split(p, "."))
	}
	return out
}

// setPath copies the field at path from src to dst, creating dst's
// intermediate messages; an unset intermediate message of src reads as
// empty, so the field is cleared.
func setPath(dst, src protoreflect.Message, path []string) {
	fd := dst.Descriptor().Fields().ByName(protoreflect.Name(path[0]))
	if len(path) > 1 {
		setPath(dst.Mutable(fd).Message(), src.Get(fd).Message(), path[1:])
		return
	}
	if src.Has(fd) {
		dst.Set(fd, src.Get(fd))
	} else {
		dst.Clear(fd)
	}
}
