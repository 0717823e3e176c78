package toolhost

import (
	"strings"
	"testing"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

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
