package errs

import (
	"regexp"
	"strings"
)

// address matches a host:port of an IP address, as gRPC's transport errors
// carry them ("dial tcp 10.0.0.7:7002: connect: connection refused").
var address = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}:\d+\b|\[[0-9A-Fa-f:.]+\]:\d+`)

// refusedPrefix precedes the address of an outbound connection the guard
// refused (package outbound): the tenant's own URL led there, and the
// refusal is only useful with it.
const refusedPrefix = "conch: outbound to "

// HideAddresses replaces the service addresses in an error message meant
// for a caller, who is not to learn the cluster's layout, with "a conch
// service". Log the original.
func HideAddresses(msg string) string {
	var b strings.Builder
	last := 0
	for _, m := range address.FindAllStringIndex(msg, -1) {
		b.WriteString(msg[last:m[0]])
		if strings.HasSuffix(msg[:m[0]], refusedPrefix) {
			b.WriteString(msg[m[0]:m[1]])
		} else {
			b.WriteString("a conch service")
		}
		last = m[1]
	}
	b.WriteString(msg[last:])
	return b.String()
}
