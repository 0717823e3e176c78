// Package config loads service configuration from defaults, environment
// variables and command-line flags, in that order of increasing precedence.
//
// A configuration is a struct whose fields carry tags:
//
//	type Config struct {
//		HTTPAddr string        `flag:"http-addr" env:"CONCH_HTTP_ADDR" default:"127.0.0.1:8080" usage:"HTTP listen address"`
//		Timeout  time.Duration `flag:"timeout" default:"5s" usage:"request timeout"`
//		Token    string        `env:"CONCH_TOKEN" usage:"API token"`
//	}
//
// Supported field types are string, bool, int, int64, float64,
// time.Duration and []string (comma separated). Untagged struct fields,
// embedded or not, are walked, so services can share a common struct.
// A field with an env tag but no flag tag can be set only from the
// environment. If the configuration has a Validate() error method, Load
// calls it after everything is applied.
package config

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// FieldError reports a problem with one configuration field.
type FieldError struct {
	// Field names the field as the user spells it: "--http-addr", or the
	// environment variable for env-only fields. Errors in a value also
	// name the variable when the field has both: "--http-addr
	// (CONCH_HTTP_ADDR)".
	Field string
	// Err says what is wrong.
	Err error
}

// Error returns "config: <field>: <err>".
func (e *FieldError) Error() string { return "config: " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// Invalid returns a *FieldError for field with a formatted reason. It is
// meant for Validate methods: config.Invalid("--port", "must be positive").
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Register defines a flag on fs for every field of cfg that has a flag tag.
// cfg must be a non-nil pointer to a struct. Load calls Register itself for
// flags that are not yet defined, so calling it first is only needed to
// print usage or share fs with other flags before loading.
func Register(fs *flag.FlagSet, cfg any) error {
	fields, err := walk(cfg)
	if err != nil {
		return err
	}
	return register(fs, fields)
}

// Load fills cfg from its default tags, then the environment, then args
// parsed by fs, and finally calls cfg.Validate if it exists. A value that
// does not parse yields a *FieldError naming the field. fs should use
// flag.ContinueOnError so that errors are returned rather than exiting;
// -h yields an error that wraps flag.ErrHelp.
func Load(fs *flag.FlagSet, args []string, cfg any) error {
	return LoadWith(fs, args, cfg, os.LookupEnv)
}

// LoadWith is Load with an explicit environment lookup function.
func LoadWith(fs *flag.FlagSet, args []string, cfg any, lookup func(string) (string, bool)) error {
	fields, err := walk(cfg)
	if err != nil {
		return err
	}
	if err := register(fs, fields); err != nil {
		return err
	}
	for _, f := range fields {
		if f.def == "" {
			continue
		}
		if err := f.set(f.def); err != nil {
			return &FieldError{Field: f.label(), Err: fmt.Errorf("default: %w", err)}
		}
	}
	for _, f := range fields {
		if f.env == "" {
			continue
		}
		if v, ok := lookup(f.env); ok {
			if err := f.set(v); err != nil {
				return &FieldError{Field: f.label(), Err: err}
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		for _, f := range fields {
			if f.flagErr != nil {
				return f.flagErr
			}
		}
		return fmt.Errorf("config: parse flags: %w", err)
	}
	if v, ok := cfg.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// Field describes one setting of a configuration as Load reads it: a
// read-only view of the tags, for references and help generated from the
// same walk that loads the values.
type Field struct {
	// Flag is the flag's name without dashes; empty for env-only fields.
	Flag string
	// Env is the environment variable; empty for flag-only fields.
	Env string
	// Default is the default tag as written; empty for none.
	Default string
	// Usage is the usage tag.
	Usage string
	// Type is how the value is written: "string", "bool", "int",
	// "float", "duration" or "list" (comma separated).
	Type string
	// Struct is the struct type that declares the field, so that a
	// reference can show the settings two commands share once.
	Struct reflect.Type
}

// Fields lists the settings of cfg, a non-nil pointer to a struct, in the
// order Load walks them.
func Fields(cfg any) ([]Field, error) {
	fields, err := walk(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]Field, len(fields))
	for i, f := range fields {
		out[i] = Field{Flag: f.flag, Env: f.env, Default: f.def, Usage: f.usage, Type: typeName(f.v.Type()), Struct: f.owner}
	}
	return out, nil
}

// typeName is how a reference names the type of a supported field.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == listType:
		return "list"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "int"
	case reflect.Float64:
		return "float"
	}
	return t.Kind().String()
}

// field is one tagged leaf of a configuration struct.
type field struct {
	// owner is the struct type that declares the field.
	owner                       reflect.Type
	name, flag, env, def, usage string
	v                           reflect.Value
	// flagErr records the last failed Set from the command line, because
	// package flag keeps only the text of the error.
	flagErr error
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	listType     = reflect.TypeFor[[]string]()
)

func walk(cfg any) ([]*field, error) {
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("config: want a non-nil pointer to a struct, got %T", cfg)
	}
	var fields []*field
	if err := walkStruct(v.Elem(), &fields); err != nil {
		return nil, err
	}
	return fields, nil
}

func walkStruct(v reflect.Value, out *[]*field) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		nested := sf.Type.Kind() == reflect.Struct && sf.Type != durationType
		// Exported fields of an unexported embedded struct are settable.
		if !sf.IsExported() && !(sf.Anonymous && nested) {
			continue
		}
		f := &field{
			name:  t.Name() + "." + sf.Name,
			flag:  sf.Tag.Get("flag"),
			env:   sf.Tag.Get("env"),
			def:   sf.Tag.Get("default"),
			usage: sf.Tag.Get("usage"),
			v:     v.Field(i),
			owner: t,
		}
		if f.flag == "" && f.env == "" && f.def == "" {
			if nested {
				if err := walkStruct(v.Field(i), out); err != nil {
					return err
				}
			}
			continue
		}
		if !supported(sf.Type) {
			return fmt.Errorf("config: field %s.%s: unsupported type %s", t.Name(), sf.Name, sf.Type)
		}
		*out = append(*out, f)
	}
	return nil
}

func supported(t reflect.Type) bool {
	if t == durationType || t == listType {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return true
	}
	return false
}

func register(fs *flag.FlagSet, fields []*field) error {
	for _, f := range fields {
		if f.flag == "" {
			continue
		}
		if existing := fs.Lookup(f.flag); existing != nil {
			fv, ok := existing.Value.(*flagValue)
			if !ok {
				return fmt.Errorf("config: flag --%s is already defined outside this configuration", f.flag)
			}
			// Rebind so that parsing writes into the struct being loaded.
			fv.f = f
			continue
		}
		usage := f.usage
		if f.env != "" {
			usage += " (env " + f.env + ")"
		}
		fs.Var(&flagValue{f: f}, f.flag, usage)
		fs.Lookup(f.flag).DefValue = f.def
	}
	return nil
}

// label names the field in error messages: "--flag (ENV)", "--flag",
// "ENV" or, for a default-only field, its Go name.
func (f *field) label() string {
	switch {
	case f.flag == "" && f.env == "":
		return f.name
	case f.flag == "":
		return f.env
	case f.env == "":
		return "--" + f.flag
	default:
		return "--" + f.flag + " (" + f.env + ")"
	}
}

// set parses s into the field.
func (f *field) set(s string) error {
	v := f.v
	if v.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		v.SetInt(int64(d))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("invalid boolean %q", s)
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 0, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid integer %q", s)
		}
		v.SetInt(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("invalid number %q", s)
		}
		v.SetFloat(x)
	case reflect.Slice:
		v.Set(reflect.ValueOf(splitList(s)))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// format renders the field's current value the way set accepts it.
func (f *field) format() string {
	v := f.v
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	switch v.Kind() {
	case reflect.Slice:
		return strings.Join(v.Interface().([]string), ",")
	default:
		return fmt.Sprint(v.Interface())
	}
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// flagValue adapts a field to flag.Value.
type flagValue struct{ f *field }

// String implements flag.Value. Package flag calls it on a zero value too.
func (v *flagValue) String() string {
	if v == nil || v.f == nil {
		return ""
	}
	return v.f.format()
}

// Set implements flag.Value.
func (v *flagValue) Set(s string) error {
	if err := v.f.set(s); err != nil {
		v.f.flagErr = &FieldError{Field: v.f.label(), Err: err}
		return err
	}
	return nil
}

// IsBoolFlag lets boolean flags be given without a value.
func (v *flagValue) IsBoolFlag() bool {
	return v != nil && v.f != nil && v.f.v.Kind() == reflect.Bool
}
