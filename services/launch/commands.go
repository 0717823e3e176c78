package launch

// Command is a conch command whose settings config.Load reads: the words
// that follow conch, what it does in one line, and a new zero value of its
// configuration. The CLI's --help and the generated configuration
// reference both read this table, and the CLI's test holds each command to
// the configuration named here.
type Command struct {
	// Name is the command as typed after conch: "router", "secrets rotate".
	Name string
	// Summary completes "conch <Name> …": "runs the router service …".
	Summary string
	// Config returns a pointer to a new zero configuration of the command.
	Config func() any
}

// Commands are the commands that take settings, in the order a reference
// lists them: the whole cluster, the four services, then the commands
// that set a cluster up or keep it.
func Commands() []Command {
	return []Command{
		{"dev", "runs the whole cluster in one process (embedded etcd, scripted model).", func() any { return new(DevConfig) }},
		{"router", "runs the router service (public HTTP, REST, agent loop).", func() any { return new(RouterConfig) }},
		{"executor", "runs the executor service (sandboxes).", func() any { return new(ExecutorConfig) }},
		{"approval", "runs the approval service (exec policy, approvals).", func() any { return new(ApprovalConfig) }},
		{"workspace", "runs the workspace service (persistent workspaces).", func() any { return new(WorkspaceConfig) }},
		{"etcd", "runs one member of a static etcd cluster (embedded etcd).", func() any { return new(EtcdConfig) }},
		{"etcd-pki", "makes the CA and the certificates etcd's mutual TLS needs.", func() any { return new(EtcdPKIConfig) }},
		{"etcd-auth", "makes each service an etcd user limited to its key prefixes, then turns etcd's authentication on.", func() any { return new(EtcdAuthConfig) }},
		{"minio-auth", "makes each service's MinIO bucket, a policy limited to it and a user holding only that policy.", func() any { return new(MinIOAuthConfig) }},
		{"node", "pairs this machine with a cluster and runs the commands addressed to it.", func() any { return new(NodeConfig) }},
		{"secrets rotate", "re-seals every stored secret with the first key of the keyring.", func() any { return new(SecretsRotateConfig) }},
	}
}

// LookupCommand returns the command of Commands named name.
func LookupCommand(name string) (Command, bool) {
	for _, c := range Commands() {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}
