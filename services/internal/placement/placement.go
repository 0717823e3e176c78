// Package placement records where sandboxes and paired nodes live, and
// sends each executor call to the executor that holds them.
//
// An executor records each sandbox it owns under
// conch/executor/sandboxes/<id>, and each node attached to it under
// conch/executor/nodes/<account>/<name>, both under its lease, with the
// gRPC address it is reachable at. The router's interceptors read these
// records and pin the call (discovery.Pin) to that address; a call about
// no particular sandbox is balanced round-robin.
package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// Key prefixes of the records.
const (
	SandboxPrefix = "conch/executor/sandboxes/"
	NodePrefix    = "conch/executor/nodes/"
)

// SandboxKey is the key of sandbox id's record.
func SandboxKey(id string) string { return SandboxPrefix + id }

// NodeKey is the key of account's node name's record. Account ids and node
// names never contain '/'.
func NodeKey(account, name string) string { return NodePrefix + account + "/" + name }

// Record says which executor holds a sandbox or a node.
type Record struct {
	// Account owns the sandbox or node.
	Account string `json:"account"`
	// Executor is the executor's instance name.
	Executor string `json:"executor"`
	// Addr is the executor's advertised gRPC address.
	Addr string `json:"addr,omitempty"`
	// User is a sandbox's workspace user.
	User string `json:"user,omitempty"`
	// Platform is a node's operating system and architecture.
	Platform string `json:"platform,omitempty"`
	// Created is when the sandbox was created or the node attached.
	Created time.Time `json:"created"`
	// Conn identifies a node's connection, so that only it removes its
	// record.
	Conn string `json:"conn,omitempty"`
}

// NodeName is the shape of a node name.
var NodeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Encode returns r as stored in etcd.
func (r Record) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// Lookup reads the record at key. A missing record is (Record{}, false,
// nil). The first read is serializable, served by the nearest etcd member;
// a miss is read again linearizably so that a record written a moment ago
// through another member is found.
func Lookup(ctx context.Context, cli *clientv3.Client, key string) (Record, bool, error) {
	r, _, found, err := etcdx.GetJSON[Record](ctx, cli, key, clientv3.WithSerializable())
	if err == nil && !found {
		r, _, found, err = etcdx.GetJSON[Record](ctx, cli, key)
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("placement: read %s: %w", key, err)
	}
	return r, found, nil
}

var errNotSent = errors.New("placement: stream used before its request was sent")
