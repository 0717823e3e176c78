package gateways

import (
	"time"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/contract"
)

// The defaults of a gateway's runtime settings left unset (0), as
// docs/reference/gateways.md lists them.
// Everything that runs a completion reads them through the functions
// below, and validation quotes them, so each has one owner.
const (
	DefaultShellTimeoutSeconds    = int32(contract.DefaultTimeout / time.Second)
	DefaultMaxOutputLength        = contract.DefaultOutputLength
	DefaultSessionIdleSeconds     = int32(contract.SessionIdle / time.Second)
	DefaultUpstreamTimeoutSeconds = 300
)

// ShellTimeoutSeconds is how long one shell command of g may run.
func ShellTimeoutSeconds(g *routerv1.Gateway) int32 {
	return orDefault(g.GetShell().GetTimeoutSeconds(), DefaultShellTimeoutSeconds)
}

// MaxOutputLength is how many characters of a command's output g's model
// gets.
func MaxOutputLength(g *routerv1.Gateway) int32 {
	return orDefault(g.GetShell().GetMaxOutputLength(), DefaultMaxOutputLength)
}

// SessionIdle is how long a session's sandbox of g outlives its last use.
func SessionIdle(g *routerv1.Gateway) time.Duration {
	return time.Duration(orDefault(g.GetShell().GetSessionIdleSeconds(), DefaultSessionIdleSeconds)) * time.Second
}

// UpstreamTimeout bounds one call to g's upstream model.
func UpstreamTimeout(g *routerv1.Gateway) time.Duration {
	return time.Duration(orDefault(g.GetUpstream().GetTimeoutSeconds(), DefaultUpstreamTimeoutSeconds)) * time.Second
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}
