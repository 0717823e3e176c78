package policy

import (
	"io/fs"
	"path"
	"time"
)

// fakeFS is a filesystem view for resolution tests: every listed path is
// an executable regular file; "noexec:" entries are plain files.
type fakeFS map[string]fs.FileMode

type fakeInfo struct {
	name string
	mode fs.FileMode
}

func (i fakeInfo) Name() string       { return i.name }
func (i fakeInfo) Size() int64        { return 0 }
func (i fakeInfo) Mode() fs.FileMode  { return i.mode }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fakeInfo) Sys() any           { return nil }

func (f fakeFS) stat(p string) (fs.FileInfo, error) {
	m, ok := f[path.Clean(p)]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return fakeInfo{name: path.Base(p), mode: m}, nil
}

func testFS() fakeFS {
	f := fakeFS{}
	for _, n := range []string{"ls", "cat", "grep", "jq", "cut", "sort", "uniq", "head", "tail", "tr", "wc", "env",
		"nice", "nohup", "timeout", "stdbuf", "xargs", "find", "git", "tar", "python3", "perl", "node", "bash", "sh",
		"dash", "busybox", "sudo", "echo", "rm", "awk", "sed", "curl", "ssh", "rsync", "setsid", "zip", "php", "ruby", "vim", "make", "chmod", "prlimit", "setarch"} {
		f["/usr/bin/"+n] = 0o755
	}
	f["/bin/sh"] = 0o755
	f["/bin/bash"] = 0o755
	f["/opt/homebrew/bin/rg"] = 0o755
	f["/usr/local/bin/jq"] = 0o755
	f["/usr/local/bin/tr"] = 0o755
	f["/home/u/bin/mytool"] = 0o755
	f["/home/u/work/wc"] = 0o755
	f["/home/u/work/run.sh"] = 0o755
	f["/home/u/work/evil/ls"] = 0o755
	f["/home/u/work/evil/grep"] = 0o755
	f["/home/u/notes.txt"] = 0o644
	f["/srv/tools/deploy"] = 0o755
	f["/home/u/Projects/a/bin/rg"] = 0o755
	return f
}
