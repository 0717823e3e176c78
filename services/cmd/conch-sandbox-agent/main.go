// Command conch-sandbox-agent is the resident agent inside each conch
// sandbox, and nothing else. The conch binary can serve as the agent too
// (its hidden sandbox-agent subcommand), but it initialises every package
// of every service before main runs, tens of milliseconds that each cold
// sandbox would wait for; this binary links only the agent. The executor
// uses it when it is installed beside the conch binary.
package main

import (
	"fmt"
	"os"

	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

func main() {
	served, err := agent.Serve(os.Args[1:])
	if !served {
		fmt.Fprintf(os.Stderr, "%s runs only as the agent of a conch sandbox, started by the executor\n", wire.AgentBinaryName)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
