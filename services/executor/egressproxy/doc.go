// Package egressproxy is a sandbox's only way out
// (docs/reference/sandboxes.md, Network): a proxy the executor runs outside the sandbox, reached from
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
//
// A secret (Policy.Secrets) is bound to domains; the sandbox holds only
// its placeholder. The proxy puts the value in a request's headers only
// for a domain the secret is bound to, and only on a connection it made
// itself for that request and whose TLS it verified for that very name
// against its upstream roots (sendSecrets), after the handshake: the
// request goes on that connection and no other. A placeholder in a
// request to any other host is refused; one in a request that would
// travel in cleartext (absolute-form http://, any port) is refused with
// 403 "conch: the secret for <domain> is only sent over https"; a
// connection whose TLS is not verified is closed before anything is sent
// (502, recorded failed). Placeholders elsewhere than in headers are never
// replaced.
package egressproxy
