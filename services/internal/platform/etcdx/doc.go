// Package etcdx connects conch services to etcd, runs an embedded etcd
// for conch dev and for integration tests, and holds the patterns every
// service repeats on etcd: ListWatch keeps a view of a prefix current
// (listing again after compaction, backing off when etcd fails), GetJSON
// and PutJSON read and write JSON values, Rewrite changes every value
// under a prefix without losing a concurrent write, blobs keep values too
// large for one request, and a SpaceWatcher owns etcd's space: it reports
// it, refuses bulk writers near the quota, and compacts, defragments and
// disarms NOSPACE so that a full etcd recovers without an operator.
//
// etcd's own zap logging is routed into slog at error level only, so a
// healthy cluster stays quiet in service logs.
package etcdx
