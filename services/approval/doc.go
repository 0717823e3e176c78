// Package approval is the approval service: it judges commands against the
// exec policy (package policy), keeps pending approvals, allowlists and the
// exec-approvals document in etcd (package store), and forwards approval
// requests to humans on chat (package notify). Callers that run commands use
// package gate; the web page lives in package ui.
package approval
