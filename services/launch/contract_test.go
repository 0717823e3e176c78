package launch

import (
	"testing"

	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
)

// TestConfigDefaults loads every command's settings with no flag and no
// variable set, and checks that the defaults their struct tags repeat
// from package contract are its numbers: a limit changed there and not
// in a tag fails here.
func TestConfigDefaults(t *testing.T) {
	configs := map[string]*ceiling.Config{}
	var dev DevConfig
	configtest.Defaults(t, &dev)
	configs["dev"] = &dev.Ceilings
	var router RouterConfig
	configtest.Defaults(t, &router)
	configs["router"] = &router.Ceilings
	var executor ExecutorConfig
	configtest.Defaults(t, &executor)
	configs["executor"] = &executor.Ceilings
	var approval ApprovalConfig
	configtest.Defaults(t, &approval)
	configs["approval"] = &approval.Ceilings
	var workspace WorkspaceConfig
	configtest.Defaults(t, &workspace)
	configs["workspace"] = &workspace.Ceilings
	for name, c := range configs {
		if c.OutputLength != contract.MaxOutputLength {
			t.Errorf("%s: --max-output-length defaults to %d, the contract's limit is %d", name, c.OutputLength, contract.MaxOutputLength)
		}
		if c.CommandTimeout != contract.ExecTimeout {
			t.Errorf("%s: --max-command-timeout defaults to %v, the contract's is %v", name, c.CommandTimeout, contract.ExecTimeout)
		}
	}
}
