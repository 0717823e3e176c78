// Package contract owns the numbers of conch's contract that more than one
// service or surface uses: the limits and defaults of commands, output,
// files, the workspace and idle times. Each is written here once; the
// services, the REST and OpenAI surfaces and the CLI use these constants,
// and the config defaults that repeat one in a struct tag are checked
// against it (TestConfigDefaults). The reference pages under docs/reference/
// say the same in words: changing a number here is the one code change it
// needs.
package contract

import "time"

const (
	// MaxCommandBytes bounds one shell command (docs/reference/tools.md).
	MaxCommandBytes = 1 << 20
	// MaxOutputLength is the most characters of a command's output any
	// request, gateway or ceiling may ask for (max_output_length).
	MaxOutputLength = 1 << 20
	// DefaultOutputLength is a shell call's output length when neither
	// the request nor the gateway sets one.
	DefaultOutputLength = 4096
	// DefaultTimeout is a shell command's timeout when neither the
	// request nor the gateway sets one.
	DefaultTimeout = 60 * time.Second
	// ExecTimeout is the exec tool's default timeout, and the longest a
	// command may ask for (the --max-command-timeout ceiling's default).
	ExecTimeout = 30 * time.Minute
	// DefaultPreviewTimeout and MaxPreviewTimeout bound a command's
	// preview on a copy of its sandbox (exec.preview_timeout_seconds).
	DefaultPreviewTimeout = 10 * time.Second
	MaxPreviewTimeout     = 60 * time.Second
	// A preview is stored with its approval: its stdout, stderr and error
	// keep at most PreviewOutputBytes each, its changes at most
	// PreviewChanges paths of at most PreviewPathBytes.
	PreviewOutputBytes = 2048
	PreviewChanges     = 50
	PreviewPathBytes   = 512
	// MaxFileBytes bounds one file written through the file APIs (REST,
	// the Containers API, the executor's file calls).
	MaxFileBytes = 100 << 20
	// WorkspaceDir is where a sandbox's workspace is mounted.
	WorkspaceDir = "/home/workspace"
	// SessionIdle is how long an idle session, MCP session or kept
	// container lives when nothing sets it.
	SessionIdle = 20 * time.Minute
	// DefaultPath is the PATH commands run with, in sandboxes and on
	// gateway hosts, and the one the policy resolves commands on.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// MaxSkillBytes bounds one skill version's files, uncompressed, in
	// total (docs/reference/skills.md).
	MaxSkillBytes = 8 << 20
	// MaxSkillFiles bounds the files of one skill version.
	MaxSkillFiles = 500
	// MaxSandboxSkills bounds the skills one sandbox mounts.
	MaxSandboxSkills = 8
	// MaxSandboxSkillBytes bounds the files of all the skills one sandbox
	// mounts, in total: the router sends them in the request that creates
	// it, which stays below the executor's message limit.
	MaxSandboxSkillBytes = 12 << 20
	// SkillsDir is where a sandbox's skills are, read-only, one directory
	// per skill named after it.
	SkillsDir = "/mnt/skills"
)
