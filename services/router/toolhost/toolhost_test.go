package toolhost

import (
	"net/netip"
	"strings"
	"testing"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip   string
		want bool
	}{
		{"93.184.215.14", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"127.8.9.10", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"0.0.0.0", false},
		{"100.64.0.1", false},
		{"fd00::1", false},
		{"fe80::1", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:10.0.0.1", false},
		{"224.0.0.1", false},
		{"255.255.255.255", false},
	}
	for _, tt := range tests {
		if got := PublicAddr(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("PublicAddr(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
}

func TestAllowedURL(t *testing.T) {
	t.Parallel()
	domains := []string{"api.example.com", "*.example.org"}
	tests := []struct {
		url     string
		wantErr string
	}{
		{"https://api.example.com/v1", ""},
		{"https://API.EXAMPLE.COM/v1", ""},
		{"https://docs.example.org/x", ""},
		{"https://example.org/x", "not in the gateway's allowed domains"},
		{"https://api.example.com.evil.net/", "not in the gateway's allowed domains"},
		{"https://evilexample.org/", "not in the gateway's allowed domains"},
		{"https://user:pw@api.example.com/", "credentials"},
		{"ftp://api.example.com/", "http"},
		{"/relative", "http"},
		{"http://127.0.0.1/", "not in the gateway's allowed domains"},
	}
	for _, tt := range tests {
		_, err := allowedURL(tt.url, domains)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("allowedURL(%q) = %v, want error containing %q", tt.url, err, tt.wantErr)
		}
	}
	if _, err := allowedURL("https://api.example.com/", nil); err == nil {
		t.Error("no allowed domains must refuse every URL")
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	s := &Set{byName: map[string]*Tool{}}
	for _, n := range []string{"a", "b", "c"} {
		tool := &Tool{Name: n}
		s.tools = append(s.tools, tool)
		s.byName[n] = tool
	}
	names := func(ts []*Tool) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		mode              routerv1.ToolsMode
		listed            []string
		wantDirect, moved string
	}{
		{routerv1.ToolsMode_TOOLS_MODE_UNSPECIFIED, nil, "a,b,c", ""},
		{routerv1.ToolsMode_TOOLS_MODE_WHITELIST, []string{"b"}, "a,c", "b"},
		{routerv1.ToolsMode_TOOLS_MODE_BLACKLIST, []string{"b"}, "b", "a,c"},
		{routerv1.ToolsMode_TOOLS_MODE_BLACKLIST, nil, "", "a,b,c"},
	}
	for _, tt := range tests {
		d, m := s.Split(&routerv1.ShellTools{Mode: tt.mode, Names: tt.listed})
		if names(d) != tt.wantDirect || names(m) != tt.moved {
			t.Errorf("Split(%v %v) = %s | %s, want %s | %s", tt.mode, tt.listed, names(d), names(m), tt.wantDirect, tt.moved)
		}
	}
}
