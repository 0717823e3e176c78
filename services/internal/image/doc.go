// Package image turns a container image into a template root: one
// normalized tar of the image's flattened filesystem, which the object
// store keeps by digest and an executor later unpacks, as root, to serve as
// a sandbox's read-only root. Every byte of an image is the tenant's, so
// every step treats it as hostile.
//
// Open reads an uploaded archive (docker or podman save, or an OCI image
// layout packed as a tar) and Pull fetches from a registry the operator
// allows; Flatten writes the root tar and Extract unpacks it. Flatten and
// Extract judge every entry by the same rules, so a root that reaches an
// executor by any way is held to them again there:
//
//   - Paths are cleaned and made relative (one leading "/" or "./" goes);
//     a path still climbing out with "..", holding a NUL, not UTF-8, longer
//     than 4096 bytes or with a name longer than 255 bytes is refused.
//   - Layers are merged by go-containerregistry's mutate.Extract, whiteouts
//     applied; a whiteout left after that is refused. Each path appears
//     once: the uppermost layer's entry wins, and an upper file or symlink
//     hides whatever a lower layer puts beneath it.
//   - Entries are regular files, directories, symlinks (any target, since
//     the sandbox reads them in its own mount namespace, of at most 4096
//     bytes) and hardlinks to a regular file earlier in the root. Devices,
//     fifos and anything else are refused. (mutate.Extract itself drops a
//     symlink whose relative target climbs above the root from where the
//     link sits; absolute targets it keeps.)
//   - A file with the setuid or setgid bit is refused: sandboxes never run
//     setuid programs, and a tenant should hear that rather than find the
//     bit gone. On a directory the bits run nothing and are dropped, since
//     distribution images carry them (/var/mail).
//   - Limits bound the content bytes and the entries; the entry that
//     crosses one is refused before its content is read.
//   - The root tar is normalized so the same image always has the same
//     digest: owner 0:0 and no owner names, permission bits (and the sticky
//     bit on directories), mtimes in whole seconds clamped to what a ustar
//     header holds, no xattrs (file capabilities go with them) and no pax
//     records but those a long or non-ASCII path needs. A directory is
//     written before anything in it; one the layers never name is 0755.
//
// Whatever is refused is a *Refusal, which matches ErrRefused: the image
// breaks a rule the tenant can fix. Every other error is the machinery's.
package image
