// Package localcluster runs a whole conch cluster as separate processes on
// this machine's loopback: a three-member etcd (`conch etcd`), a MinIO
// server, and two processes of each service (router, executor, approval,
// workspace), each on ports of its own.
//
// `make cluster` starts one detached, so it outlives the command, and
// `make cluster-down` stops it from the state file the cluster keeps in its
// directory. The fault-injection suite starts one per test, attached, so
// that nothing outlives the test binary, and kills, stops and restarts
// members one at a time.
//
// Every member runs in a process group of its own, so killing a member
// kills what it started too (as when its machine or container dies), and a
// restarted member reuses its ports and data directory.
package localcluster
