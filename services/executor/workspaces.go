package executor

import (
	"context"

	"github.com/conch-sh/conch/services/executor/wsclient"
	"github.com/conch-sh/conch/services/executor/wsync"
)

// Workspaces stores persistent workspaces: the workspace service.
type Workspaces interface {
	// Usage returns what the user's workspace stores: bytes and entries.
	Usage(ctx context.Context, account, user string) (bytes, files int64, err error)
	// Hydrate fills root with the user's workspace and returns its revision
	// and the etag of each file it wrote.
	Hydrate(ctx context.Context, account, user string, root *wsync.Root) (rev int64, etags map[string]string, err error)
	// Flush sends the changes of root since the last sync.
	Flush(ctx context.Context, account, user string, in wsclient.FlushInput) (wsclient.FlushResult, error)
}
