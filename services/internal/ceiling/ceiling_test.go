package ceiling

import (
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
)

// TestDefaultsMatchTags: Defaults is what a Config no one set loads as.
func TestDefaultsMatchTags(t *testing.T) {
	var c Config
	configtest.Defaults(t, &c)
	if c != Defaults {
		t.Errorf("loaded %+v, Defaults %+v", c, Defaults)
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		v, floor, ceil int64
		want           string
	}{
		{0, 10, 100, ""},
		{10, 10, 100, ""},
		{100, 10, 100, ""},
		{9, 10, 100, "f: must be 0 (the default) or at least 10, got 9"},
		{-1, 10, 100, "f: must be 0 (the default) or at least 10, got -1"},
		{101, 10, 100, "f: 101 is above the ceiling of 100"},
	} {
		err := Check("f", tc.v, tc.floor, tc.ceil)
		if got := errString(err); got != tc.want {
			t.Errorf("Check(%d, %d, %d) = %q, want %q", tc.v, tc.floor, tc.ceil, got, tc.want)
		}
	}
}

func TestIdle(t *testing.T) {
	c := Defaults
	c.IdleTimeout = time.Hour
	never := c
	never.NeverIdle = true
	for _, tc := range []struct {
		c       Config
		seconds int64
		want    time.Duration
		err     string
	}{
		{c, 0, time.Hour, ""},
		{never, 0, 0, ""},
		{c, 60, time.Minute, ""},
		{c, 3600, time.Hour, ""},
		{c, 3601, 0, "idle: 3601 is above the ceiling of 3600"},
		{never, 3601, 0, "idle: 3601 is above the ceiling of 3600"},
		{c, -1, 0, "idle: must not be negative"},
	} {
		got, err := tc.c.Idle("idle", tc.seconds)
		if errString(err) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("Idle(%d) never=%v = %v, %v; want %v, %q", tc.seconds, tc.c.NeverIdle, got, err, tc.want, tc.err)
		}
	}
}

func TestLifetime(t *testing.T) {
	c := Defaults
	c.SandboxLifetime = time.Hour
	unbounded := c
	unbounded.SandboxLifetime = 0
	for _, tc := range []struct {
		c       Config
		seconds int64
		want    time.Duration
		err     string
	}{
		{c, 0, time.Hour, ""},
		{unbounded, 0, 0, ""},
		{c, 1, time.Second, ""},
		{c, 3600, time.Hour, ""},
		{c, 3601, 0, "ttl: 3601 is above the ceiling of 3600"},
		{unbounded, 1 << 31, 1 << 31 * time.Second, ""},
		{c, -1, 0, "ttl: must not be negative"},
		{unbounded, -1, 0, "ttl: must not be negative"},
	} {
		got, err := tc.c.Lifetime("ttl", tc.seconds)
		if errString(err) != tc.err || (err == nil && got != tc.want) {
			t.Errorf("Lifetime(%d) ceiling=%v = %v, %v; want %v, %q", tc.seconds, tc.c.SandboxLifetime, got, err, tc.want, tc.err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.MemoryBytes = 1 << 20 }, "--max-memory-bytes"},
		{func(c *Config) { c.Pids = 1 }, "--max-pids"},
		{func(c *Config) { c.OutputLength = 0 }, "--max-output-length"},
		{func(c *Config) { c.IdleTimeout = time.Second }, "--max-idle-timeout"},
		{func(c *Config) { c.SandboxLifetime = time.Second }, "--max-sandbox-lifetime"},
		{func(c *Config) { c.SandboxLifetime = 0 }, ""},
	} {
		c := Defaults
		tc.edit(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
