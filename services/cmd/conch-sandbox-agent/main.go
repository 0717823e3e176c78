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

	"github.com/conch-sh/conch/services/executor/sandbox"
)

func main() {
	if len(os.Args) != 2 || os.Args[1] != sandbox.AgentCommand {
		fmt.Fprintf(os.Stderr, "%s runs only as the agent of a conch sandbox, started by the executor\n", sandbox.AgentBinaryName)
		os.Exit(2)
	}
	if err := sandbox.RunAgent(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
