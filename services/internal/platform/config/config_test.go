package config

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type Shared struct {
	LogLevel string `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"log level"`
}

type common struct {
	Etcd []string `flag:"etcd" env:"CONCH_ETCD" default:"127.0.0.1:2379" usage:"etcd endpoints"`
}

type testConfig struct {
	Shared
	common
	HTTPAddr string        `flag:"http-addr" env:"CONCH_HTTP_ADDR" default:"127.0.0.1:8080" usage:"HTTP address"`
	Debug    bool          `flag:"debug" env:"CONCH_DEBUG" usage:"debug mode"`
	Workers  int           `flag:"workers" env:"CONCH_WORKERS" default:"4" usage:"worker count"`
	MaxBytes int64         `flag:"max-bytes" env:"CONCH_MAX_BYTES" default:"1048576" usage:"max bytes"`
	Ratio    float64       `flag:"ratio" env:"CONCH_RATIO" default:"0.5" usage:"sample ratio"`
	Timeout  time.Duration `flag:"timeout" env:"CONCH_TIMEOUT" default:"5s" usage:"timeout"`
	Token    string        `env:"CONCH_TOKEN" usage:"API token"`
	Limits   struct {
		Burst int `flag:"burst" default:"10" usage:"burst"`
	}
	Ignored string
}

func (c *testConfig) Validate() error {
	if c.Workers <= 0 {
		return Invalid("--workers", "must be positive, got %d", c.Workers)
	}
	return nil
}

func defaults() testConfig {
	var c testConfig
	c.LogLevel = "info"
	c.Etcd = []string{"127.0.0.1:2379"}
	c.HTTPAddr = "127.0.0.1:8080"
	c.Workers = 4
	c.MaxBytes = 1 << 20
	c.Ratio = 0.5
	c.Timeout = 5 * time.Second
	c.Limits.Burst = 10
	return c
}

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		args []string
		want func(*testConfig)
	}{
		{
			name: "defaults",
			want: func(*testConfig) {},
		},
		{
			name: "env overrides default",
			env:  []string{"CONCH_HTTP_ADDR", "0.0.0.0:9000", "CONCH_WORKERS", "8"},
			want: func(c *testConfig) { c.HTTPAddr = "0.0.0.0:9000"; c.Workers = 8 },
		},
		{
			name: "flag overrides env",
			env:  []string{"CONCH_HTTP_ADDR", "0.0.0.0:9000"},
			args: []string{"--http-addr", "0.0.0.0:9001"},
			want: func(c *testConfig) { c.HTTPAddr = "0.0.0.0:9001" },
		},
		{
			name: "every kind from flags",
			args: []string{
				"--debug", "--workers=2", "--max-bytes=0x10", "--ratio=0.25",
				"--timeout=1m30s", "--etcd=a:1, b:2,,c:3", "--log-level=debug", "--burst=3",
			},
			want: func(c *testConfig) {
				c.Debug = true
				c.Workers = 2
				c.MaxBytes = 16
				c.Ratio = 0.25
				c.Timeout = 90 * time.Second
				c.Etcd = []string{"a:1", "b:2", "c:3"}
				c.LogLevel = "debug"
				c.Limits.Burst = 3
			},
		},
		{
			name: "every kind from env",
			env: []string{
				"CONCH_DEBUG", "true", "CONCH_WORKERS", "3", "CONCH_MAX_BYTES", "99",
				"CONCH_RATIO", "1.5", "CONCH_TIMEOUT", "250ms", "CONCH_ETCD", "x:1,y:2",
				"CONCH_LOG_LEVEL", "warn",
			},
			want: func(c *testConfig) {
				c.Debug = true
				c.Workers = 3
				c.MaxBytes = 99
				c.Ratio = 1.5
				c.Timeout = 250 * time.Millisecond
				c.Etcd = []string{"x:1", "y:2"}
				c.LogLevel = "warn"
			},
		},
		{
			name: "bool flag overrides env",
			env:  []string{"CONCH_DEBUG", "true"},
			args: []string{"--debug=false"},
			want: func(c *testConfig) {},
		},
		{
			name: "empty env list clears default",
			env:  []string{"CONCH_ETCD", ""},
			want: func(c *testConfig) { c.Etcd = nil },
		},
		{
			name: "env-only field",
			env:  []string{"CONCH_TOKEN", "s3cret"},
			want: func(c *testConfig) { c.Token = "s3cret" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got testConfig
			if err := LoadWith(newFlagSet(), tt.args, &got, env(tt.env...)); err != nil {
				t.Fatalf("LoadWith: %v", err)
			}
			want := defaults()
			tt.want(&want)
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(testConfig{})); diff != "" {
				t.Errorf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name      string
		env       []string
		args      []string
		wantField string
		wantMsg   string
	}{
		{"bad duration env", []string{"CONCH_TIMEOUT", "x"}, nil, "--timeout (CONCH_TIMEOUT)",
			`config: --timeout (CONCH_TIMEOUT): invalid duration "x"`},
		{"bad duration flag", nil, []string{"--timeout", "x"}, "--timeout (CONCH_TIMEOUT)",
			`config: --timeout (CONCH_TIMEOUT): invalid duration "x"`},
		{"bad int", nil, []string{"--workers=many"}, "--workers (CONCH_WORKERS)",
			`config: --workers (CONCH_WORKERS): invalid integer "many"`},
		{"bad int64", []string{"CONCH_MAX_BYTES", "1.5"}, nil, "--max-bytes (CONCH_MAX_BYTES)",
			`config: --max-bytes (CONCH_MAX_BYTES): invalid integer "1.5"`},
		{"bad float", nil, []string{"--ratio=half"}, "--ratio (CONCH_RATIO)",
			`config: --ratio (CONCH_RATIO): invalid number "half"`},
		{"bad bool", []string{"CONCH_DEBUG", "maybe"}, nil, "--debug (CONCH_DEBUG)",
			`config: --debug (CONCH_DEBUG): invalid boolean "maybe"`},
		{"flag-only field", nil, []string{"--burst=x"}, "--burst",
			`config: --burst: invalid integer "x"`},
		{"validate", nil, []string{"--workers=0"}, "--workers",
			"config: --workers: must be positive, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg testConfig
			err := LoadWith(newFlagSet(), tt.args, &cfg, env(tt.env...))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("LoadWith() = %v, want a *FieldError", err)
			}
			if fe.Field != tt.wantField {
				t.Errorf("Field = %q, want %q", fe.Field, tt.wantField)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.wantMsg)
			}
		})
	}
}

func TestEnvOnlyErrorNamesEnv(t *testing.T) {
	var cfg struct {
		Port int `env:"CONCH_PORT"`
	}
	err := LoadWith(newFlagSet(), nil, &cfg, env("CONCH_PORT", "x"))
	if want := `config: CONCH_PORT: invalid integer "x"`; err == nil || err.Error() != want {
		t.Fatalf("LoadWith() = %v, want %q", err, want)
	}
}

func TestEnvOnlyFieldHasNoFlag(t *testing.T) {
	fs := newFlagSet()
	if err := Register(fs, &testConfig{}); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if fs.Lookup("token") != nil {
		t.Error("env-only field Token has a flag")
	}
	var cfg testConfig
	if err := LoadWith(fs, []string{"--token=x"}, &cfg, env()); err == nil {
		t.Error("LoadWith accepted --token for an env-only field")
	}
}

func TestRegister(t *testing.T) {
	fs := newFlagSet()
	var cfg testConfig
	if err := Register(fs, &cfg); err != nil {
		t.Fatalf("Register: %v", err)
	}
	tests := []struct {
		flag, wantDef string
		wantUsage     string
	}{
		{"http-addr", "127.0.0.1:8080", "HTTP address (env CONCH_HTTP_ADDR)"},
		{"timeout", "5s", "timeout (env CONCH_TIMEOUT)"},
		{"burst", "10", "burst"},
		{"log-level", "info", "log level (env CONCH_LOG_LEVEL)"},
		{"etcd", "127.0.0.1:2379", "etcd endpoints (env CONCH_ETCD)"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			f := fs.Lookup(tt.flag)
			if f == nil {
				t.Fatalf("flag --%s not defined", tt.flag)
			}
			if f.DefValue != tt.wantDef || f.Usage != tt.wantUsage {
				t.Errorf("flag --%s = (%q, %q), want (%q, %q)", tt.flag, f.DefValue, f.Usage, tt.wantDef, tt.wantUsage)
			}
		})
	}

	// Registered flags are reused by Load, and help output works.
	if err := LoadWith(fs, []string{"--workers=7"}, &cfg, env()); err != nil {
		t.Fatalf("LoadWith after Register: %v", err)
	}
	if cfg.Workers != 7 {
		t.Errorf("Workers = %d, want 7", cfg.Workers)
	}
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	fs.PrintDefaults()
	if !strings.Contains(buf.String(), "(default 127.0.0.1:8080)") {
		t.Errorf("usage lacks the tag default:\n%s", buf.String())
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		cfg  any
		fs   func() *flag.FlagSet
	}{
		{"not a pointer", testConfig{}, newFlagSet},
		{"nil pointer", (*testConfig)(nil), newFlagSet},
		{"unsupported type", &struct {
			M map[string]string `flag:"m"`
		}{}, newFlagSet},
		{"foreign flag", &struct {
			V bool `flag:"v"`
		}{}, func() *flag.FlagSet {
			fs := newFlagSet()
			fs.Bool("v", false, "verbose")
			return fs
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Register(tt.fs(), tt.cfg); err == nil {
				t.Error("Register succeeded, want error")
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var cfg testConfig
	err := LoadWith(newFlagSet(), []string{"-h"}, &cfg, env())
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("LoadWith(-h) = %v, want flag.ErrHelp", err)
	}
}

func TestFields(t *testing.T) {
	t.Parallel()
	fields, err := Fields(&testConfig{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Flag, Env, Default, Type, Struct string }
	var got []row
	for _, f := range fields {
		got = append(got, row{f.Flag, f.Env, f.Default, f.Type, f.Struct.Name()})
	}
	want := []row{
		{"log-level", "CONCH_LOG_LEVEL", "info", "string", "Shared"},
		{"etcd", "CONCH_ETCD", "127.0.0.1:2379", "list", "common"},
		{"http-addr", "CONCH_HTTP_ADDR", "127.0.0.1:8080", "string", "testConfig"},
		{"debug", "CONCH_DEBUG", "", "bool", "testConfig"},
		{"workers", "CONCH_WORKERS", "4", "int", "testConfig"},
		{"max-bytes", "CONCH_MAX_BYTES", "1048576", "int", "testConfig"},
		{"ratio", "CONCH_RATIO", "0.5", "float", "testConfig"},
		{"timeout", "CONCH_TIMEOUT", "5s", "duration", "testConfig"},
		{"", "CONCH_TOKEN", "", "string", "testConfig"},
		{"burst", "", "10", "int", ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Fields (-want +got):\n%s", diff)
	}
	if _, err := Fields(testConfig{}); err == nil {
		t.Error("Fields of a struct value: want an error")
	}
}
