// Package benchreport turns the output of `go test -bench` into conch's
// benchmark report: each row is one metric of one benchmark, shown beside
// the floor it is measured against in the same run (a bare fork+exec, a
// bare bubblewrap, a direct upstream or MinIO call), their ratio, and the
// target the issues set for it. Rows is the table of conch's rows.
package benchreport
