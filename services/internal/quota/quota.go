// Package quota owns the persistent workspace quota
// (docs/how-to/workspace-files.md): its defaults, which the workspace service
// enforces, the executor sizes sandboxes by and the gateways fall back to,
// and the error that says it was hit, which HTTP answers with 413
// (errs.ReasonWorkspaceQuotaExceeded).
package quota

import (
	"fmt"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Defaults of a persistent workspace (docs/how-to/workspace-files.md): what
// it may hold when no gateway or setting says otherwise. Files count every
// entry: files, directories and links.
const (
	DefaultBytes = 1 << 30
	DefaultFiles = 100_000
)

// Limits is the quota of one workspace; 0 in a field means the default.
type Limits struct {
	Bytes, Files int64
}

// OrDefault returns l with its unset fields at the defaults.
func (l Limits) OrDefault() Limits {
	if l.Bytes <= 0 {
		l.Bytes = DefaultBytes
	}
	if l.Files <= 0 {
		l.Files = DefaultFiles
	}
	return l
}

// exceeded starts the message of every quota refusal, which people and
// tests recognise it by; programs use its reason.
const exceeded = "workspace quota exceeded: "

// Exceeded returns the refusal of a change that would take a workspace
// beyond its quota; the message says what was needed and what is allowed.
// Its reason travels with it between services, so the router answers it
// 413 wherever it came from.
func Exceeded(format string, args ...any) error {
	return errs.NewReason(errs.ResourceExhausted, errs.ReasonWorkspaceQuotaExceeded, "%s", exceeded+fmt.Sprintf(format, args...))
}
