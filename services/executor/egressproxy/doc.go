// Package egressproxy is a sandbox's only way out (SPEC §4 network
// allowlist): a proxy the executor runs outside the sandbox, reached from
// inside through a unix socket the sandbox's agent bridges to a loopback
// port. It speaks HTTP (absolute-form requests), HTTPS CONNECT tunnels and
// SOCKS5 CONNECT on that one socket, telling them apart by the first byte.
//
// A connection is allowed when the name the client asked for is on the
// sandbox's allowlist and its port on the port list; the proxy then
// resolves the name itself and dials only an address that no rule refuses
// (package egress, conch's own addresses, the executor host's addresses
// and configured ranges), checking the address it actually dials on every
// connection, so that a name re-pointed between two lookups gains nothing.
// A refusal is an answer, never a hang: HTTP 403 with a message naming the
// host, port and gateway, or SOCKS5 "not allowed by ruleset".
package egressproxy
