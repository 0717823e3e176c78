// Package outbound is the one guard on the connections conch makes on a
// tenant's behalf: upstream model calls, webhook and MCP tools, approval
// forwarding, the reviewer, the built-in request tools, and the sandbox
// egress proxy's own dials.
//
// Every URL and host there is written by a tenant, so each is a way into
// the cluster. The guard resolves names itself and judges the address it
// is about to dial, on every connection (redirects included), never a
// name or an earlier lookup: loopback, private, link-local, carrier-grade
// NAT, multicast, unspecified and reserved addresses, the node's own
// addresses, the ranges the operator denies and the control plane (etcd,
// MinIO) are refused. Only the operator widens it (Options.Allow, the
// --outbound-allow setting), never a tenant; the control plane stays
// refused even then.
package outbound
