package outbound

import (
	"net/netip"
	"strings"
	"testing"
)

func TestClass(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ip   string
		want string // "" for allowed
	}{
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"198.51.100.1", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd00:ec2::254", "private"},
		{"fc00::1", "private"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"255.255.255.255", "reserved"},
		{"240.0.0.1", "reserved"},
		{"198.18.0.1", "reserved"},
		{"64:ff9b::a00:1", "private"},
		{"64:ff9b::808:808", ""},
		{"2002:7f00:1::", "loopback"},
		{"2002:a9fe:a9fe::", "link-local"},
		{"::a00:1", "private"},
		{"fec0::1", "site-local"},
	}
	for _, c := range cases {
		got := Class(netip.MustParseAddr(c.ip))
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Class(%s) = %q, want one saying %q", c.ip, got, c.want)
		}
	}
}
