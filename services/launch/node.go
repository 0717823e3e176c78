package launch

import (
	"context"
	"os"
	"path/filepath"

	"github.com/conch-sh/conch/services/executor/nodeagent"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/logging"
)

// NodeConfig is the configuration of `conch node`.
type NodeConfig struct {
	Join     string `flag:"join" env:"CONCH_NODE_JOIN" usage:"router to connect to: https://host[:port], or http://host:port for a local cluster"`
	Name     string `flag:"name" env:"CONCH_NODE_NAME" usage:"this node's paired name (conch nodes create NAME)"`
	Token    string `flag:"token" env:"CONCH_NODE_TOKEN" usage:"the node's pairing token (prefer the environment variable)"`
	Workdir  string `flag:"workdir" env:"CONCH_NODE_WORKDIR" usage:"where commands start, and their HOME (default: your home directory)"`
	LogLevel string `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}

// Validate checks the node's settings.
func (c *NodeConfig) Validate() error {
	if c.Join == "" {
		return config.Invalid("--join", "is required")
	}
	if !placement.NodeName.MatchString(c.Name) {
		return config.Invalid("--name", "must be 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit")
	}
	if c.Token == "" {
		return config.Invalid("--token", "is required")
	}
	if c.Workdir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return config.Invalid("--workdir", "no home directory to default to: %v", err)
		}
		c.Workdir = home
	}
	if !filepath.IsAbs(c.Workdir) {
		return config.Invalid("--workdir", "must be an absolute path")
	}
	if st, err := os.Stat(c.Workdir); err != nil || !st.IsDir() {
		return config.Invalid("--workdir", "%s is not a directory", c.Workdir)
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	return nil
}

// RunNode runs `conch node` until ctx ends.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	lvl, _ := logging.ParseLevel(cfg.LogLevel)
	return nodeagent.Run(ctx, nodeagent.Options{
		Join: cfg.Join, Name: cfg.Name, Token: cfg.Token, Workdir: filepath.Clean(cfg.Workdir),
		Logger: logging.New(os.Stderr, lvl),
	})
}
