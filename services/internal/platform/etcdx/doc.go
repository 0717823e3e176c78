// Package etcdx connects conch services to etcd and runs an embedded etcd
// for conch dev and for integration tests.
//
// etcd's own zap logging is routed into slog at error level only, so a
// healthy cluster stays quiet in service logs.
package etcdx
