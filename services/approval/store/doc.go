// Package store keeps the approval service's state in etcd: each account's
// exec-approvals document, its forwarding config (with its chat tokens
// sealed, see package seal), and approvals. A pending approval is a record
// plus a "live" key under a lease as long as the approval timeout; etcd
// removes the live key when nobody answered in time. Every change is a
// transaction that compares revisions, so an approval is resolved, expired
// or consumed exactly once however many replicas and approvers race.
package store
