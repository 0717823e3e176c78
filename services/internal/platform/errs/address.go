package errs

import "regexp"

// address matches a host:port of an IP address, as gRPC's transport errors
// carry them ("dial tcp 10.0.0.7:7002: connect: connection refused").
var address = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}:\d+\b|\[[0-9A-Fa-f:.]+\]:\d+`)

// HideAddresses replaces the service addresses in an error message meant
// for a caller, who is not to learn the cluster's layout, with "a conch
// service". Log the original.
func HideAddresses(msg string) string {
	return address.ReplaceAllString(msg, "a conch service")
}
