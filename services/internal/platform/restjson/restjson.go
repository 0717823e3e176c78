// Package restjson is the JSON codec of conch's REST API: protojson with the
// proto field names (snake_case) on output, zero values emitted, enums
// written as the lowercase words the documentation uses ("exit", "allow-once",
// "on-miss") instead of their proto names, and 64-bit integers written as
// JSON numbers (sizes, counts and times in milliseconds stay far below
// 2^53) rather than protojson's strings. Input accepts snake_case or
// camelCase field names and enums as words, proto names or numbers.
package restjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Marshaler is a runtime.Marshaler for grpc-gateway.
type Marshaler struct {
	runtime.JSONPb
}

var _ runtime.Marshaler = (*Marshaler)(nil)

// New returns the REST marshaler.
func New() *Marshaler {
	return &Marshaler{JSONPb: runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{},
	}}
}

// Marshal writes v as JSON, enums as words.
func (m *Marshaler) Marshal(v any) ([]byte, error) {
	msg, ok := v.(proto.Message)
	if !ok {
		return m.JSONPb.Marshal(v)
	}
	b, err := m.MarshalOptions.Marshal(msg)
	if err != nil {
		return nil, err
	}
	md := msg.ProtoReflect().Descriptor()
	if !needsRewrite(md, true, map[protoreflect.FullName]bool{}) {
		// protojson varies its whitespace on purpose; clients and tests
		// get one stable, compact form.
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return nil, fmt.Errorf("restjson: compact: %w", err)
		}
		return buf.Bytes(), nil
	}
	tree, err := decodeTree(b)
	if err != nil {
		return nil, err
	}
	tree = rewriteMessage(md, tree, rewrite{enum: toWord, numbers: true})
	return encodeTree(tree)
}

// NewEncoder returns an encoder using Marshal.
func (m *Marshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		_, err = w.Write(m.Delimiter())
		return err
	})
}

// Unmarshal reads JSON into v, accepting enum words. v is a message or, as
// grpc-gateway passes for a body field, a pointer to a message pointer.
func (m *Marshaler) Unmarshal(data []byte, v any) error {
	msg, ok := asMessage(v)
	if !ok {
		return m.JSONPb.Unmarshal(data, v)
	}
	data, err := wordsToNames(msg, data)
	if err != nil {
		return err
	}
	if err := m.UnmarshalOptions.Unmarshal(data, msg); err != nil {
		return explain(msg.ProtoReflect().Descriptor(), data, err)
	}
	return nil
}

// NewDecoder returns a decoder using Unmarshal on each JSON value of r.
func (m *Marshaler) NewDecoder(r io.Reader) runtime.Decoder {
	// The bytes read so far position a syntax error.
	var read bytes.Buffer
	dec := json.NewDecoder(io.TeeReader(r, &read))
	return runtime.DecoderFunc(func(v any) error {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntaxError(err, read.Bytes())
		}
		return m.Unmarshal(raw, v)
	})
}

var messageType = reflect.TypeFor[proto.Message]()

// asMessage returns v as a message, allocating it when v points to a nil
// message pointer.
func asMessage(v any) (proto.Message, bool) {
	if m, ok := v.(proto.Message); ok {
		return m, true
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Pointer || !rv.Elem().Type().Implements(messageType) {
		return nil, false
	}
	if rv.Elem().IsNil() {
		rv.Elem().Set(reflect.New(rv.Elem().Type().Elem()))
	}
	return rv.Elem().Interface().(proto.Message), true
}

func wordsToNames(msg proto.Message, data []byte) ([]byte, error) {
	md := msg.ProtoReflect().Descriptor()
	if !needsRewrite(md, false, map[protoreflect.FullName]bool{}) {
		return data, nil
	}
	tree, err := decodeTree(data)
	if err != nil {
		// Let protojson report the syntax error with its position.
		return data, nil
	}
	var bad *enumError
	tree = rewriteMessage(md, tree, rewrite{
		enum: func(ed protoreflect.EnumDescriptor, word string) (string, bool) {
			name, ok := toName(ed, word)
			if !ok && bad == nil && ed.Values().ByName(protoreflect.Name(word)) == nil {
				bad = unknownWord(ed)
			}
			return name, ok
		},
		field: func(fd protoreflect.FieldDescriptor) {
			if bad != nil && bad.field == "" {
				bad.field = string(fd.Name())
			}
		},
	})
	if bad != nil {
		// The walk names the whole path of the field.
		if e := walkMessage(md, tree, ""); e != nil {
			return nil, e
		}
		return nil, bad
	}
	return encodeTree(tree)
}

// unknownWord is the refusal of an enum value that is no word of ed,
// listing the words there are (protojson's own message names the proto
// type, which a user never wrote). The field's name is added by the
// caller through enumField.
func unknownWord(ed protoreflect.EnumDescriptor) *enumError {
	var words []string
	for i := 0; i < ed.Values().Len(); i++ {
		if w, _ := toWord(ed, string(ed.Values().Get(i).Name())); w != "" {
			words = append(words, w)
		}
	}
	list := strings.Join(words, ", ")
	if n := len(words); n > 1 {
		list = strings.Join(words[:n-1], ", ") + " or " + words[n-1]
	}
	return &enumError{words: list}
}

// enumError is an unknown enum word; field is filled in where the field
// is known.
type enumError struct {
	field, words string
}

func (e *enumError) Error() string {
	return fmt.Sprintf("%s: must be %s", e.field, e.words)
}

// QueryParser parses query parameters like grpc-gateway's default parser but
// accepts enum words.
type QueryParser struct{}

var _ runtime.QueryParameterParser = QueryParser{}

// Parse implements runtime.QueryParameterParser. A value that does not
// parse is refused naming its parameter, in plain words.
func (QueryParser) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	md := msg.ProtoReflect().Descriptor()
	rewritten := make(url.Values, len(values))
	for key, vals := range values {
		fd := fieldByPath(md, key)
		if fd == nil {
			rewritten[key] = vals
			continue
		}
		if err := checkQuery(fd, key, vals); err != nil {
			return err
		}
		if fd.Enum() == nil {
			rewritten[key] = vals
			continue
		}
		out := make([]string, len(vals))
		for i, v := range vals {
			if name, ok := toName(fd.Enum(), v); ok {
				out[i] = name
			} else {
				out[i] = v
			}
		}
		rewritten[key] = out
	}
	if err := (&runtime.DefaultQueryParser{}).Parse(msg, rewritten, filter); err != nil {
		if m := queryFieldError.FindStringSubmatch(err.Error()); m != nil {
			return invalidField(m[1], "not a valid value")
		}
		return &DecodeError{msg: "query: not valid"}
	}
	return nil
}

// queryFieldError is grpc-gateway's refusal of a query parameter.
var queryFieldError = regexp.MustCompile(`field "([^"]+)"`)

// checkQuery is the problem of the values vals of the query parameter key
// for field fd.
func checkQuery(fd protoreflect.FieldDescriptor, key string, vals []string) error {
	if !fd.IsList() && len(vals) > 1 {
		return invalidField(key, "give one value, got %d", len(vals))
	}
	for _, v := range vals {
		var e *DecodeError
		switch {
		case fd.Enum() != nil:
			e = walkEnum(fd.Enum(), v, key)
		case fd.Message() != nil:
			e = walkWellKnown(fd.Message(), v, key)
		case fd.Kind() == protoreflect.BoolKind:
			if _, err := strconv.ParseBool(v); err != nil {
				e = invalidField(key, "want true or false, got %s", describe(v))
			}
		case fd.Kind() == protoreflect.StringKind:
		default:
			e = walkScalar(fd.Kind(), v, key)
		}
		if e != nil {
			return e
		}
	}
	return nil
}

func fieldByPath(md protoreflect.MessageDescriptor, path string) protoreflect.FieldDescriptor {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		fd := md.Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			fd = md.Fields().ByJSONName(p)
		}
		if fd == nil {
			return nil
		}
		if i == len(parts)-1 {
			return fd
		}
		if fd.Message() == nil {
			return nil
		}
		md = fd.Message()
	}
	return nil
}

// enumPrefix is the common prefix of an enum's value names, taken from its
// zero value: OUTCOME_TYPE_UNSPECIFIED gives OUTCOME_TYPE_.
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	zero := string(ed.Values().Get(0).Name())
	return strings.TrimSuffix(zero, "UNSPECIFIED")
}

// toWord turns a proto enum name into the documentation's word:
// ASK_ON_MISS → on-miss, and an *_UNSPECIFIED zero value into "".
func toWord(ed protoreflect.EnumDescriptor, name string) (string, bool) {
	if ed.Values().ByName(protoreflect.Name(name)) == nil {
		return "", false
	}
	word := strings.TrimPrefix(name, enumPrefix(ed))
	if word == "UNSPECIFIED" {
		return "", true
	}
	return strings.ReplaceAll(strings.ToLower(word), "_", "-"), true
}

// toName turns a word back into the proto enum name; "" is the zero value.
func toName(ed protoreflect.EnumDescriptor, word string) (string, bool) {
	if word == "" {
		return string(ed.Values().Get(0).Name()), true
	}
	if strings.ContainsAny(word, "_") || strings.ToLower(word) != word {
		return "", false // a proto name or something protojson will reject
	}
	name := enumPrefix(ed) + strings.ToUpper(strings.ReplaceAll(word, "-", "_"))
	if ed.Values().ByName(protoreflect.Name(name)) == nil || strings.HasSuffix(name, "_UNSPECIFIED") {
		return "", false
	}
	return name, true
}

// rewrite says how a JSON tree changes: enum values through enum, and, on
// output, 64-bit integers from strings to numbers.
type rewrite struct {
	enum    func(protoreflect.EnumDescriptor, string) (string, bool)
	numbers bool
	// field, when set, learns the field of a value enum did not take.
	field func(protoreflect.FieldDescriptor)
}

// is64 reports whether protojson writes fd's values as strings.
func is64(fd protoreflect.FieldDescriptor) bool {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

// needsRewrite reports whether md (or a message within it) has enums, or,
// for output, 64-bit integers.
func needsRewrite(md protoreflect.MessageDescriptor, output bool, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] || isWellKnown(md) {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Enum() != nil && fd.Enum().FullName() != "google.protobuf.NullValue" || output && is64(fd) {
			return true
		}
		if fd.Message() != nil && needsRewrite(fd.Message(), output, seen) {
			return true
		}
	}
	return false
}

func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

func rewriteMessage(md protoreflect.MessageDescriptor, node any, f rewrite) any {
	obj, ok := node.(map[string]any)
	if !ok || isWellKnown(md) {
		return node
	}
	for key, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		if fd == nil {
			continue
		}
		obj[key] = rewriteField(fd, val, f)
	}
	return obj
}

func rewriteField(fd protoreflect.FieldDescriptor, val any, f rewrite) any {
	switch {
	case fd.IsMap():
		if m, ok := val.(map[string]any); ok {
			for k, v := range m {
				m[k] = rewriteSingle(fd.MapValue(), v, f)
			}
		}
		return val
	case fd.IsList():
		if l, ok := val.([]any); ok {
			for i, v := range l {
				l[i] = rewriteSingle(fd, v, f)
			}
		}
		return val
	default:
		return rewriteSingle(fd, val, f)
	}
}

func rewriteSingle(fd protoreflect.FieldDescriptor, val any, f rewrite) any {
	switch {
	case fd.Enum() != nil:
		if s, ok := val.(string); ok {
			if out, ok := f.enum(fd.Enum(), s); ok {
				return out
			}
			if f.field != nil {
				f.field(fd)
			}
		}
		return val
	case f.numbers && is64(fd):
		if s, ok := val.(string); ok {
			return json.Number(s)
		}
		return val
	case fd.Message() != nil:
		return rewriteMessage(fd.Message(), val, f)
	default:
		return val
	}
}

func decodeTree(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("restjson: decode: %w", err)
	}
	return tree, nil
}

func encodeTree(tree any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(tree); err != nil {
		return nil, fmt.Errorf("restjson: encode: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
