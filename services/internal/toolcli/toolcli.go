// Package toolcli turns a tool's JSON Schema into a command line
// (docs/reference/tools.md): one flag per property, --help generated from the
// schema, and the parsed flags turned back into the tool's JSON arguments.
// The sandbox's tool commands use it.
package toolcli

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// UsageError is a command line that does not fit the schema; the command
// prints it with the usage and exits 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ErrHelp is returned by Parse for --help (or -h).
var ErrHelp = errors.New("help requested")

// property is one flag.
type property struct {
	name     string // JSON name
	typ      string // string, integer, number, boolean, array, object
	itemType string // for arrays
	desc     string
	required bool
	enum     []any
	def      any
	min, max *float64
	exMin    bool
	exMax    bool
}

// Command is a tool as a command.
type Command struct {
	Name        string
	Description string
	props       map[string]*property // by flag spelling (both _ and -)
	order       []*property
	schema      *jsonschema.Schema
}

// New builds the command of a tool from its JSON Schema (empty: no
// arguments).
func New(name, description string, schema []byte) (*Command, error) {
	if len(schema) == 0 {
		schema = []byte(`{"type":"object","properties":{}}`)
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("toolcli: %s: schema: %w", name, err)
	}
	c := &Command{Name: name, Description: description, props: map[string]*property{}}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var ps struct {
			Type        any             `json:"type"`
			Description string          `json:"description"`
			Enum        []any           `json:"enum"`
			Default     any             `json:"default"`
			Minimum     *float64        `json:"minimum"`
			Maximum     *float64        `json:"maximum"`
			ExMin       json.RawMessage `json:"exclusiveMinimum"`
			ExMax       json.RawMessage `json:"exclusiveMaximum"`
			Items       struct {
				Type any `json:"type"`
			} `json:"items"`
		}
		if err := json.Unmarshal(s.Properties[n], &ps); err != nil {
			return nil, fmt.Errorf("toolcli: %s: property %s: %w", name, n, err)
		}
		p := &property{name: n, typ: typeOf(ps.Type), itemType: typeOf(ps.Items.Type), desc: ps.Description, enum: ps.Enum, def: ps.Default, min: ps.Minimum, max: ps.Maximum}
		if v, ok := number(ps.ExMin); ok {
			p.min, p.exMin = &v, true
		}
		if v, ok := number(ps.ExMax); ok {
			p.max, p.exMax = &v, true
		}
		for _, r := range s.Required {
			p.required = p.required || r == n
		}
		c.order = append(c.order, p)
		c.props[n] = p
		c.props[strings.ReplaceAll(n, "_", "-")] = p
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(schema)))
	if err != nil {
		return nil, fmt.Errorf("toolcli: %s: schema: %w", name, err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("tool.json", doc); err != nil {
		return nil, err
	}
	if c.schema, err = comp.Compile("tool.json"); err != nil {
		return nil, fmt.Errorf("toolcli: %s: schema: %w", name, err)
	}
	return c, nil
}

func number(raw json.RawMessage) (float64, bool) {
	var v float64
	return v, len(raw) > 0 && json.Unmarshal(raw, &v) == nil
}

// typeOf reads a schema "type", which may be a list (the first non-null
// type counts).
func typeOf(t any) string {
	switch v := t.(type) {
	case string:
		return v
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
	}
	return "string"
}

// Help is the text of --help.
func (c *Command) Help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s [flags]\n", c.Name)
	if c.Description != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(c.Description))
	}
	b.WriteString("\nFlags:\n")
	for _, p := range c.order {
		flag := "--" + strings.ReplaceAll(p.name, "_", "-")
		switch p.typ {
		case "boolean":
		case "array":
			flag += " " + p.itemType + " (repeat for more)"
		case "object":
			flag += " JSON"
		default:
			flag += " " + p.typ
		}
		fmt.Fprintf(&b, "  %s\n", flag)
		var facts []string
		if p.required {
			facts = append(facts, "required")
		}
		if len(p.enum) > 0 {
			vals := make([]string, len(p.enum))
			for i, e := range p.enum {
				vals[i] = fmt.Sprint(e)
			}
			facts = append(facts, "one of: "+strings.Join(vals, ", "))
		}
		if p.def != nil {
			facts = append(facts, fmt.Sprintf("default: %v", p.def))
		}
		if p.min != nil {
			facts = append(facts, fmt.Sprintf("minimum: %v", *p.min))
		}
		if p.max != nil {
			facts = append(facts, fmt.Sprintf("maximum: %v", *p.max))
		}
		line := p.desc
		if len(facts) > 0 {
			if line != "" {
				line += " "
			}
			line += "(" + strings.Join(facts, "; ") + ")"
		}
		if line != "" {
			fmt.Fprintf(&b, "      %s\n", line)
		}
	}
	b.WriteString("  --json JSON\n      pass the arguments as one JSON object instead of flags\n")
	b.WriteString("  --help\n      show this help\n")
	return b.String()
}

// Parse turns a command line into the tool's arguments, checked against the
// schema. It returns ErrHelp for --help and a *UsageError for a bad command
// line.
func (c *Command) Parse(args []string) (map[string]any, error) {
	out := map[string]any{}
	var raw string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--help" || a == "-h" {
			return nil, ErrHelp
		}
		if !strings.HasPrefix(a, "--") || a == "--" {
			return nil, usagef("unexpected argument %q: every argument is a --flag", a)
		}
		name, val, hasVal := strings.Cut(a[2:], "=")
		if name == "json" {
			if !hasVal {
				if i+1 >= len(args) {
					return nil, usagef("--json needs a JSON object")
				}
				i++
				val = args[i]
			}
			raw = val
			continue
		}
		p, ok := c.props[name]
		if !ok {
			return nil, usagef("unknown flag --%s", name)
		}
		if p.typ == "boolean" && !hasVal {
			out[p.name] = true
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				return nil, usagef("--%s needs a value", name)
			}
			i++
			val = args[i]
		}
		if p.typ == "array" {
			v, err := p.parse(p.itemType, val)
			if err != nil {
				return nil, err
			}
			list, _ := out[p.name].([]any)
			out[p.name] = append(list, v)
			continue
		}
		if _, dup := out[p.name]; dup {
			return nil, usagef("--%s is given twice", name)
		}
		v, err := p.parse(p.typ, val)
		if err != nil {
			return nil, err
		}
		out[p.name] = v
	}
	if raw != "" {
		if len(out) > 0 {
			return nil, usagef("--json cannot be combined with other flags")
		}
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			return nil, usagef("--json: not a JSON object: %v", err)
		}
	}
	for _, p := range c.order {
		if _, ok := out[p.name]; !ok && p.required {
			return nil, usagef("missing required flag --%s", strings.ReplaceAll(p.name, "_", "-"))
		}
	}
	if err := c.validate(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Command) validate(args map[string]any) error {
	b, err := json.Marshal(args)
	if err != nil {
		return usagef("arguments: %v", err)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		return usagef("arguments: %v", err)
	}
	if err := c.schema.Validate(v); err != nil {
		return usagef("invalid arguments: %s", strings.TrimSpace(err.Error()))
	}
	return nil
}

// parse reads one value of type typ.
func (p *property) parse(typ, val string) (any, error) {
	flag := "--" + strings.ReplaceAll(p.name, "_", "-")
	var v any
	switch typ {
	case "integer":
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return nil, usagef("%s: %q is not an integer", flag, val)
		}
		if err := p.inRange(flag, float64(n)); err != nil {
			return nil, err
		}
		v = n
	case "number":
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, usagef("%s: %q is not a number", flag, val)
		}
		if err := p.inRange(flag, f); err != nil {
			return nil, err
		}
		v = f
	case "boolean":
		b, err := strconv.ParseBool(val)
		if err != nil {
			return nil, usagef("%s: %q is not true or false", flag, val)
		}
		v = b
	case "object", "array":
		if err := json.Unmarshal([]byte(val), &v); err != nil {
			return nil, usagef("%s: not valid JSON: %v", flag, err)
		}
	default:
		v = val
	}
	if len(p.enum) > 0 && p.typ != "array" {
		ok := false
		for _, e := range p.enum {
			ok = ok || fmt.Sprint(e) == fmt.Sprint(v)
		}
		if !ok {
			vals := make([]string, len(p.enum))
			for i, e := range p.enum {
				vals[i] = fmt.Sprint(e)
			}
			return nil, usagef("%s: %q is not one of %s", flag, val, strings.Join(vals, ", "))
		}
	}
	return v, nil
}

func (p *property) inRange(flag string, f float64) error {
	if p.min != nil && (f < *p.min || p.exMin && f == *p.min) {
		return usagef("%s: %v is below the minimum %v", flag, f, *p.min)
	}
	if p.max != nil && (f > *p.max || p.exMax && f == *p.max) {
		return usagef("%s: %v is above the maximum %v", flag, f, *p.max)
	}
	return nil
}
