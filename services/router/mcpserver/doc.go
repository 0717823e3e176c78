// Package mcpserver serves conch to clients of the Model Context Protocol
// over streamable HTTP at /mcp and /mcp/{gateway}: the gateway's shell,
// exec, process, direct tools and read_skill, the session workspace's
// files as tools and as resources, and approvals asked through MCP
// elicitation or waited for with progress notifications.
//
// Each MCP session (Mcp-Session-Id) belongs to the account whose key
// opened it and has its own server, whose tools are those a completion of
// the gateway would offer (completion.Toolbox), and its own sandbox, kept
// while the session lives and released when it ends.
//
//   - handler.go: the HTTP side, sessions and their accounts
//   - tools.go: the tools, their schemas and argument checks
//   - files.go: the workspace file tools and resources
//   - approvals.go: pending approvals, elicitation and progress
//   - notices.go: a call's HTTP response, which counts the withdrawals
//     written on it
package mcpserver
