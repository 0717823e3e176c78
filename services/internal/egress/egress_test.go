package egress

import (
	"strings"
	"testing"
)

func TestNormalizePattern(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
		bad      bool
	}{
		{in: "api.github.com", want: "api.github.com"},
		{in: "API.GitHub.COM.", want: "api.github.com"},
		{in: "*.PyPI.org", want: "*.pypi.org"},
		{in: "bücher.example", want: "xn--bcher-kva.example"},
		{in: "*.bücher.example", want: "*.xn--bcher-kva.example"},
		{in: "10.0.0.1", want: "10.0.0.1"},
		{in: "[2001:DB8::1]", want: "2001:db8::1"},
		{in: "::ffff:1.2.3.4", want: "1.2.3.4"},
		{in: "*.com", bad: true},
		{in: "localhost", bad: true},
		{in: "*", bad: true},
		{in: "a.*.example", bad: true},
		{in: "**.example.com", bad: true},
		{in: "a b.example", bad: true},
		{in: "", bad: true},
		{in: "exa_mple.com", bad: true},
		{in: "fe80::1%eth0", bad: true},
		{in: strings.Repeat("a", 64) + ".com", bad: true},
	}
	for _, c := range cases {
		got, err := NormalizePattern(c.in)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("NormalizePattern(%q) = %q, %v; want %q (bad %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func TestAllowlistMatch(t *testing.T) {
	t.Parallel()
	a, err := NewAllowlist([]string{"api.github.com", "*.pypi.org", "bücher.example", "192.0.2.7", "2001:db8::7"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		want bool
	}{
		{"api.github.com", true},
		{"API.GITHUB.COM", true},
		{"api.github.com.", true},
		{"github.com", false},
		{"xapi.github.com", false},
		{"api.github.com.evil.org", false},
		{"files.pypi.org", true},
		{"a.b.pypi.org", true},
		{"pypi.org", false},
		{"evilpypi.org", false},
		{"pypi.org.evil", false},
		{"BÜCHER.example", true},
		{"xn--bcher-kva.example", true},
		{"192.0.2.7", true},
		{"[2001:db8::7]", true},
		{"2001:DB8:0::7", true},
		{"::ffff:192.0.2.7", true},
		{"192.0.2.8", false},
		{"3221226247", false}, // 192.0.2.7 as a number: a name, not listed
		{"0xc0000207", false},
		{"", false},
		{"*.pypi.org", false},
		{"a..pypi.org", false},
	}
	for _, c := range cases {
		if got := a.Match(c.host); got != c.want {
			t.Errorf("Match(%q) = %v, want %v", c.host, got, c.want)
		}
	}
	if (*Allowlist)(nil).Match("api.github.com") {
		t.Error("a nil allowlist matched")
	}
}

func TestCovers(t *testing.T) {
	t.Parallel()
	wide := []string{"api.github.com", "*.pypi.org", "192.0.2.7"}
	cases := []struct {
		p    string
		want bool
	}{
		{"api.github.com", true},
		{"files.pypi.org", true},
		{"*.pypi.org", true},
		{"*.files.pypi.org", true},
		{"192.0.2.7", true},
		{"pypi.org", false},
		{"*.org", false},
		{"github.com", false},
		{"*.github.com", false},
		{"*.evilpypi.org", false},
		{"192.0.2.8", false},
	}
	for _, c := range cases {
		if got := Covers(wide, c.p); got != c.want {
			t.Errorf("Covers(%q) = %v, want %v", c.p, got, c.want)
		}
	}
}

// FuzzAllowlist checks the matcher against its definition: a host matches
// an exact entry when they normalise alike, a suffix entry when its
// normalised form ends with "." and the suffix.
func FuzzAllowlist(f *testing.F) {
	for _, s := range [][2]string{{"api.github.com", "API.github.com"}, {"*.pypi.org", "a.pypi.org"}, {"*.pypi.org", "pypi.org"}, {"bücher.example", "xn--bcher-kva.example"}, {"192.0.2.1", "::ffff:192.0.2.1"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		a, err := NewAllowlist([]string{pattern})
		if err != nil {
			return
		}
		norm, _ := NormalizePattern(pattern)
		got := a.Match(host)
		want := false
		if ip, ok := parseIP(host); ok {
			want = ip.String() == norm
		} else if n, err := NormalizeName(host); err == nil {
			if s, ok := strings.CutPrefix(norm, "*"); ok {
				want = strings.HasSuffix(n, s) && len(n) > len(s)
			} else {
				want = n == norm
			}
		}
		if got != want {
			t.Fatalf("pattern %q (%q) host %q: match %v, want %v", pattern, norm, host, got, want)
		}
		// A matched name is one an exact entry of its own covers.
		if got {
			if n, err := NormalizePattern(host); err == nil && !Covers([]string{norm}, n) {
				t.Fatalf("pattern %q matches %q but does not cover it", norm, n)
			}
		}
	})
}
