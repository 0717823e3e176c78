// Package execpolicy owns the rules that layer exec settings
// (docs/explanation/exec-policy.md): which security and ask mode a command
// runs under, given the host, the gateway's exec settings, the exec-approvals
// document and the tightening layers after them. Every service that decides
// or forwards those settings (router, executor, approval) asks this package,
// so a rule changes in one place only.
//
// The rules:
//   - Per-host defaults: host sandbox runs with security full and ask off,
//     since its isolation is the protection; hosts gateway and node run
//     with security allowlist, ask on-miss and ask fallback deny. A host
//     left unspecified is the sandbox.
//   - Stricter wins: where two layers set a field, the stricter value
//     counts (deny over allowlist over full; always over on-miss over off).
//     A layer that leaves a field unset defers to the others.
//   - For hosts gateway and node the exec-approvals document and the
//     gateway's exec settings combine stricter-wins; for host sandbox the
//     gateway's settings alone choose (Effective).
//   - A fallback never exceeds the security mode: ask fallback full under
//     security allowlist is allowlist.
//   - Later layers, a session's /exec override and a model's per-command
//     request, may only tighten: a looser security or ask is not applied,
//     the host may only move to the sandbox, and a node only be named on
//     host node, and only the gateway's node when it names one (Tighten).
//   - A command must be put to the approval service unless it runs in the
//     sandbox under full security without asking (Needed).
//
// The package speaks the approval API's types (approvalv1.Host, Security,
// Ask and ExecSettings): they are what the router, the executor and the
// gate already hold and what crosses every service boundary, so only the
// approval service's engine, which has compact types of its own for its hot
// path, converts, and its conversions carry no rules. The document's own
// rule that an agent's entry overrides the document's defaults is not a
// stricter rule and stays with the document.
package execpolicy
