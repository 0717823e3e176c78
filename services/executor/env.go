package executor

import (
	"github.com/conch-sh/conch/services/internal/execenv"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// validateEnv checks a command's extra environment against the names a
// request may set (execenv) and returns an InvalidArgument error naming
// the first bad variable.
func validateEnv(env map[string]string) error {
	if err := execenv.CheckAll(env); err != nil {
		return errs.New(errs.InvalidArgument, "%v", err)
	}
	return nil
}
