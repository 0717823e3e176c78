package restjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// A request that does not decode is refused in the words the caller wrote
// it in, never protojson's or encoding/json's, which name proto types, Go
// types and camelCase names the caller may not have used. A message names
// the field at fault first, by conch's convention ("limits.pids: want an
// integer, got \"x\""), or is `unknown field "path"`; errs.FieldOf reads
// the field back from either.

// DecodeError is a request body that is not valid JSON, or not of the
// request's shape. grpc-gateway passes on only its words.
type DecodeError struct {
	msg string
}

// Error returns what was wrong, in plain words.
func (e *DecodeError) Error() string { return e.msg }

func invalidField(path, format string, args ...any) *DecodeError {
	return &DecodeError{msg: path + ": " + fmt.Sprintf(format, args...)}
}

// syntaxError is the refusal of a body that is not JSON; consumed is the
// body read so far, which positions the error.
func syntaxError(err error, consumed []byte) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		line, col := position(consumed, se.Offset)
		return &DecodeError{msg: fmt.Sprintf("request body is not valid JSON: %s at line %d, column %d", se.Error(), line, col)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &DecodeError{msg: "request body is not valid JSON: it ends before the JSON value does"}
	}
	return err
}

// JSONError is err, an error of encoding/json decoding data into a Go
// value, in the words of the API's other refusals: a syntax error with its
// line and column, a value of the wrong JSON type with its field's path
// and the type wanted; nil for nil.
func JSONError(data []byte, err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		// Value is the JSON type ("array"), or "number 1.5".
		got, ok := strings.CutPrefix(te.Value, "number ")
		switch {
		case ok:
		case te.Value == "array" || te.Value == "object":
			got = "an " + te.Value
		default:
			got = "a " + te.Value
		}
		if te.Field == "" {
			return &DecodeError{msg: fmt.Sprintf("request body: want %s, got %s", goKind(te.Type.Kind()), got)}
		}
		return invalidField(te.Field, "want %s, got %s", goKind(te.Type.Kind()), got)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) {
		return syntaxError(err, data)
	}
	return &DecodeError{msg: "request body is not valid JSON"}
}

// goKind is the JSON a Go value of kind k is decoded from.
func goKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

// position is the line and column (from 1) of the byte before offset in b.
func position(b []byte, offset int64) (line, col int) {
	if offset > int64(len(b)) {
		offset = int64(len(b))
	}
	if offset > 0 {
		offset-- // encoding/json's offset is past the byte at fault
	}
	before := b[:offset]
	line = 1 + bytes.Count(before, []byte("\n"))
	col = 1 + len(before) - (bytes.LastIndexByte(before, '\n') + 1)
	return line, col
}

// explain is the refusal of data, which protojson refused with err, for
// md: the first problem found walking data against md, or else protojson's
// words without its prefix and position.
func explain(md protoreflect.MessageDescriptor, data []byte, err error) error {
	var se *json.SyntaxError
	var probe any
	if jerr := json.Unmarshal(data, &probe); jerr != nil {
		if errors.As(jerr, &se) || errors.Is(jerr, io.ErrUnexpectedEOF) {
			return syntaxError(jerr, data)
		}
		return &DecodeError{msg: "request body is not valid JSON"}
	}
	tree, terr := decodeTree(data)
	if terr == nil {
		if _, ok := tree.(map[string]any); !ok {
			return &DecodeError{msg: "request body: want a JSON object, got " + describe(tree)}
		}
		if e := walkMessage(md, tree, ""); e != nil {
			return e
		}
	}
	return &DecodeError{msg: "request body: " + protoWords.ReplaceAllString(err.Error(), "")}
}

// protoWords are protojson's prefix and position.
var protoWords = regexp.MustCompile(`^proto:\s*(syntax error\s*)?(\(line \d+:\d+\):\s*)?`)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// walkMessage is the first problem of node as a message md at path.
func walkMessage(md protoreflect.MessageDescriptor, node any, path string) *DecodeError {
	if node == nil {
		return nil
	}
	if isWellKnown(md) {
		return walkWellKnown(md, node, path)
	}
	obj, ok := node.(map[string]any)
	if !ok {
		return invalidField(path, "want an object, got %s", describe(node))
	}
	oneofs := map[protoreflect.FullName]string{}
	for key, val := range obj {
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		if fd == nil {
			return &DecodeError{msg: fmt.Sprintf("unknown field %q", join(path, key))}
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && val != nil {
			if other, ok := oneofs[od.FullName()]; ok {
				return invalidField(join(path, key), "cannot be set with %s: they are alternatives", join(path, other))
			}
			oneofs[od.FullName()] = key
		}
		if e := walkField(fd, val, join(path, key)); e != nil {
			return e
		}
	}
	return nil
}

func walkField(fd protoreflect.FieldDescriptor, val any, path string) *DecodeError {
	if val == nil {
		return nil
	}
	switch {
	case fd.IsMap():
		obj, ok := val.(map[string]any)
		if !ok {
			return invalidField(path, "want an object, got %s", describe(val))
		}
		for k, v := range obj {
			if e := walkSingle(fd.MapValue(), v, path+"."+k); e != nil {
				return e
			}
		}
		return nil
	case fd.IsList():
		list, ok := val.([]any)
		if !ok {
			return invalidField(path, "want an array, got %s", describe(val))
		}
		for i, v := range list {
			if e := walkSingle(fd, v, fmt.Sprintf("%s[%d]", path, i)); e != nil {
				return e
			}
		}
		return nil
	}
	return walkSingle(fd, val, path)
}

// walkSingle is the problem of one value of fd, as protojson reads it.
func walkSingle(fd protoreflect.FieldDescriptor, val any, path string) *DecodeError {
	if val == nil {
		return nil
	}
	if fd.Message() != nil {
		return walkMessage(fd.Message(), val, path)
	}
	if fd.Enum() != nil {
		return walkEnum(fd.Enum(), val, path)
	}
	return walkScalar(fd.Kind(), val, path)
}

func walkEnum(ed protoreflect.EnumDescriptor, val any, path string) *DecodeError {
	switch v := val.(type) {
	case string:
		if _, ok := toName(ed, v); ok || ed.Values().ByName(protoreflect.Name(v)) != nil {
			return nil
		}
	case json.Number:
		if _, err := strconv.ParseInt(v.String(), 10, 32); err == nil {
			return nil
		}
	}
	if ed.FullName() == "google.protobuf.NullValue" {
		return invalidField(path, "want null, got %s", describe(val))
	}
	return invalidField(path, "must be %s, got %s", unknownWord(ed).words, describe(val))
}

func walkScalar(kind protoreflect.Kind, val any, path string) *DecodeError {
	switch kind {
	case protoreflect.StringKind:
		if _, ok := val.(string); !ok {
			return invalidField(path, "want a string, got %s", describe(val))
		}
	case protoreflect.BoolKind:
		if _, ok := val.(bool); !ok {
			return invalidField(path, "want true or false, got %s", describe(val))
		}
	case protoreflect.BytesKind:
		s, ok := val.(string)
		if !ok || !isBase64(s) {
			return invalidField(path, "want a base64 string, got %s", describe(val))
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if !isNumber(val) {
			return invalidField(path, "want a number, got %s", describe(val))
		}
	default:
		lo, hi, what := intRange(kind)
		if !isInteger(val, lo, hi) {
			return invalidField(path, "want %s, got %s", what, describe(val))
		}
	}
	return nil
}

// intRange is the range of an integer kind, and how to say it.
func intRange(kind protoreflect.Kind) (lo, hi float64, what string) {
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return math.MinInt32, math.MaxInt32, "an integer from -2147483648 to 2147483647"
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return 0, math.MaxUint32, "an integer from 0 to 4294967295"
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return 0, math.MaxUint64, "a non-negative integer"
	default:
		return math.MinInt64, math.MaxInt64, "an integer"
	}
}

// isInteger reports whether val is a whole number within [lo, hi],
// written as a JSON number or a string, as protojson accepts.
func isInteger(val any, lo, hi float64) bool {
	var s string
	switch v := val.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = v
	default:
		return false
	}
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f == math.Trunc(f) && f >= lo && f <= hi
}

func isNumber(val any) bool {
	switch v := val.(type) {
	case json.Number:
		return true
	case string:
		if v == "NaN" || v == "Infinity" || v == "-Infinity" {
			return true
		}
		_, err := strconv.ParseFloat(v, 64)
		return err == nil
	}
	return false
}

func isBase64(s string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if _, err := enc.DecodeString(s); err == nil {
			return true
		}
	}
	return false
}

// walkWellKnown checks the JSON forms of the google.protobuf types conch's
// API uses; the others are left to protojson.
func walkWellKnown(md protoreflect.MessageDescriptor, val any, path string) *DecodeError {
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		s, ok := val.(string)
		if _, err := time.Parse(time.RFC3339Nano, s); !ok || err != nil {
			return invalidField(path, "want a time as RFC 3339 (\"2006-01-02T15:04:05Z\"), got %s", describe(val))
		}
	case "google.protobuf.Duration":
		s, ok := val.(string)
		if !ok || !strings.HasSuffix(s, "s") {
			return invalidField(path, "want a duration in seconds (\"1.5s\"), got %s", describe(val))
		}
		if _, err := strconv.ParseFloat(strings.TrimSuffix(s, "s"), 64); err != nil {
			return invalidField(path, "want a duration in seconds (\"1.5s\"), got %s", describe(val))
		}
	case "google.protobuf.Struct":
		if _, ok := val.(map[string]any); !ok {
			return invalidField(path, "want an object, got %s", describe(val))
		}
	case "google.protobuf.ListValue":
		if _, ok := val.([]any); !ok {
			return invalidField(path, "want an array, got %s", describe(val))
		}
	case "google.protobuf.StringValue", "google.protobuf.BoolValue", "google.protobuf.BytesValue",
		"google.protobuf.Int32Value", "google.protobuf.Int64Value", "google.protobuf.UInt32Value",
		"google.protobuf.UInt64Value", "google.protobuf.FloatValue", "google.protobuf.DoubleValue":
		return walkScalar(md.Fields().ByName("value").Kind(), val, path)
	}
	return nil
}

// describe is a JSON value as a message quotes it: short strings and
// numbers as written, others by their type.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			return "a string of " + strconv.Itoa(len(v)) + " bytes"
		}
		return strconv.Quote(v)
	case json.Number:
		if len(v) > 40 {
			return "a number"
		}
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a value of another kind"
}
