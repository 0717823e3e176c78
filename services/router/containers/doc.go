// Package containers serves OpenAI's Containers API at /v1/containers
// (docs/reference/containers-api.md) over conch sandboxes, so that OpenAI's
// clients manage them unchanged.
//
// A container is a sandbox of the caller's account, and its id is the
// sandbox's: the sandboxes of /api/v1/sandboxes and of chat completions
// are containers too. Its name is kept by the executor with the sandbox;
// expires_after is the sandbox's idle timeout; a conch extension, user,
// mounts that user's persistent workspace. A container's files are the
// regular files of its /home/workspace (OpenAI's /mnt/data), read and
// written by the executor's file calls, which never follow a symlink. A
// file's id encodes its path, so a file a command wrote has an id too and
// every router replica answers for every file.
package containers
