package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/internal/platform/dirlock"
)

// Storage on btrfs: with Config.Storage set, a sandbox's writable state
// (its workspace, /tmp and a template workdir's layer) is three btrfs
// subvolumes instead of three tmpfs, each held to its size by a quota
// group. A fork then snapshots them: the copies share every block with
// their source until either writes it, whatever their size.
//
// The executor makes and removes subvolumes with the ioctls below. The
// sandbox may issue none of them (package seccomp refuses every btrfs
// ioctl): a subvolume it made inside its own would be counted by a quota
// group of its own, limited by nothing.

// The ioctls and structures of linux/btrfs.h used here.
const (
	btrfsIocSubvolCreate = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	btrfsIocSnapDestroy  = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	btrfsIocSnapCreateV2 = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	btrfsIocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	btrfsIocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)

	btrfsQuotaCtlEnable = 1
	btrfsLimitMaxRfer   = 1 << 0 // BTRFS_QGROUP_LIMIT_MAX_RFER
)

type btrfsVolArgs struct {
	fd   int64
	name [4088]byte
}

type btrfsVolArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64
	name    [4040]byte
}

type btrfsQuotaCtlArgs struct{ cmd, status uint64 }

type btrfsQgroupLimitArgs struct {
	qgroupid                                  uint64
	flags, maxRfer, maxExcl, rsvRfer, rsvExcl uint64
}

// storage is the btrfs directory this runtime keeps sandboxes' writable
// state in: an instance of its own under Config.Storage.
type storage struct {
	inst *dirlock.Instance
}

// openStorage takes an instance directory under root, which must be on
// btrfs, and turns the filesystem's quotas on (the executor's sandboxes'
// sizes are quota limits). A random name keeps the host's name and the
// executor's pid out of sandboxes' mountinfo, which shows a bind's path
// within its filesystem.
//
// What executors that ended without cleaning up left there is removed;
// what could not be is returned in stale, for the caller to log, and
// tried again by the next executor to start.
func openStorage(root string) (_ *storage, stale, _ error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, nil, fmt.Errorf("sandbox: storage: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, nil, fmt.Errorf("sandbox: storage: %w", err)
	}
	if st.Type != unix.BTRFS_SUPER_MAGIC {
		return nil, nil, fmt.Errorf("sandbox: storage %s is not on btrfs (its filesystem's magic is %#x)", root, st.Type)
	}
	d, err := os.Open(root)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: storage: %w", err)
	}
	args := btrfsQuotaCtlArgs{cmd: btrfsQuotaCtlEnable}
	err = ioctl(d, btrfsIocQuotaCtl, unsafe.Pointer(&args))
	d.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: storage %s: turn quotas on: %w", root, err)
	}
	inst, stale, err := dirlock.TakeInstance(root, hostName(), removeInstance)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: storage: %w", err)
	}
	// The instance is a shared mount of its own, so that a mount made
	// over a sandbox's subvolume (adopt) propagates into the sandbox:
	// bubblewrap makes every mount of a sandbox's namespace a slave, and
	// a bind of a slave is a slave of the same group.
	if err := unix.Mount(inst.Dir, inst.Dir, "", unix.MS_BIND, ""); err != nil {
		inst.Close()
		return nil, nil, fmt.Errorf("sandbox: storage: bind %s: %w", inst.Dir, err)
	}
	if err := unix.Mount("", inst.Dir, "", unix.MS_SHARED, ""); err != nil {
		_ = removeInstance(inst.Dir)
		inst.Close()
		return nil, nil, fmt.Errorf("sandbox: storage: share %s: %w", inst.Dir, err)
	}
	return &storage{inst: inst}, stale, nil
}

// removeInstance removes an instance directory: its mount, and the mounts
// over its sandboxes' subvolumes with it, then its subvolumes.
func removeInstance(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount: %w", err)
	}
	return removeVolumes(dir)
}

// dir is where the sandbox named name keeps its subvolumes.
func (st *storage) dir(name string) string { return filepath.Join(st.inst.Dir, name) }

// close removes what is left and frees the instance.
func (st *storage) close() error {
	return errors.Join(removeInstance(st.inst.Dir), st.inst.Close())
}

// volume makes the subvolume path, a snapshot of from when from is not
// "", held to limit bytes; files owned by fromUID in the snapshot become
// uid's. Nothing else can reach path before it returns, so the walk
// races with no one.
func volume(path, from string, fromUID, uid int, limit int64) error {
	parent, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sandbox: storage: %w", err)
	}
	defer parent.Close()
	name := filepath.Base(path)
	if from == "" {
		var a btrfsVolArgs
		copy(a.name[:len(a.name)-1], name)
		err = ioctl(parent, btrfsIocSubvolCreate, unsafe.Pointer(&a))
	} else {
		var src *os.File
		if src, err = os.OpenFile(from, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err != nil {
			return fmt.Errorf("sandbox: storage: %w", err)
		}
		a := btrfsVolArgsV2{fd: int64(src.Fd())}
		copy(a.name[:len(a.name)-1], name)
		err = ioctl(parent, btrfsIocSnapCreateV2, unsafe.Pointer(&a))
		src.Close()
	}
	if err != nil {
		return fmt.Errorf("sandbox: storage: make %s: %w", name, err)
	}
	if err := limitVolume(path, limit); err != nil {
		return err
	}
	if from == "" || fromUID == uid {
		return nil
	}
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("sandbox: storage: no owner for %s", p)
		}
		if int(st.Uid) == fromUID {
			return os.Lchown(p, uid, uid)
		}
		return nil
	})
}

// limitVolume sets the size of the subvolume path.
func limitVolume(path string, limit int64) error {
	v, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sandbox: storage: %w", err)
	}
	defer v.Close()
	// Qgroup 0 is the subvolume of the file the ioctl is issued on.
	l := btrfsQgroupLimitArgs{flags: btrfsLimitMaxRfer, maxRfer: uint64(limit)}
	if err := ioctl(v, btrfsIocQgroupLimit, unsafe.Pointer(&l)); err != nil {
		return fmt.Errorf("sandbox: storage: limit %s: %w", filepath.Base(path), err)
	}
	return nil
}

// removeVolumes removes dir, deleting each subvolume in it, at any depth
// the executor makes them (a sandbox's own directory, or an instance's),
// at once; the filesystem frees their blocks in the background.
func removeVolumes(dir string) error {
	var errs []error
	var walk func(d string, depth int)
	walk = func(d string, depth int) {
		entries, err := os.ReadDir(d)
		if err != nil {
			return
		}
		f, err := os.Open(d)
		if err != nil {
			return
		}
		defer f.Close()
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			var a btrfsVolArgs
			copy(a.name[:len(a.name)-1], e.Name())
			err := ioctl(f, btrfsIocSnapDestroy, unsafe.Pointer(&a))
			if err != nil && depth > 0 {
				walk(filepath.Join(d, e.Name()), depth-1)
			}
		}
	}
	walk(dir, 1)
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := c.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// makeVolumes makes s's subvolumes for its workspace and /tmp under
// storage, snapshots of spec.From's when it is set. A template
// workdir's layer is made with its overlay (makeLayer).
func (s *Sandbox) makeVolumes(spec Spec, name string, cleanups *[]func()) error {
	s.vol = s.rt.store.dir(name)
	if err := os.Mkdir(s.vol, 0o711); err != nil {
		return fmt.Errorf("sandbox: storage: %w", err)
	}
	*cleanups = append(*cleanups, func() { _ = removeVolumes(s.vol) })
	s.workspace, s.tmp = filepath.Join(s.vol, "workspace"), filepath.Join(s.vol, "tmp")
	for _, v := range []struct {
		path, from string
		mode       os.FileMode
		limit      int64
	}{
		{s.workspace, fromPath(spec.From, func(f *Sandbox) string { return f.workspace }), 0o700, spec.Limits.WorkspaceBytes},
		// As bubblewrap's tmpfs would be: the sandbox user's.
		{s.tmp, fromPath(spec.From, func(f *Sandbox) string { return f.tmp }), 0o755, spec.Limits.TmpBytes},
	} {
		if err := s.volume(v.path, v.from, v.limit); err != nil {
			return err
		}
		if v.from != "" {
			continue
		}
		if err := os.Chmod(v.path, v.mode); err != nil {
			return fmt.Errorf("sandbox: storage: %w", err)
		}
		if err := os.Lchown(v.path, s.uid, s.uid); err != nil {
			return fmt.Errorf("sandbox: storage: %w", err)
		}
	}
	return nil
}

// volume makes s's subvolume path, a copy of from (one of spec.From's,
// its files made s's) when from is not "".
func (s *Sandbox) volume(path, from string, limit int64) error {
	fromUID := s.uid
	if f := s.spec.From; f != nil {
		fromUID = f.uid
	}
	return volume(path, from, fromUID, s.uid, limit)
}

// fromPath is what path picks of f, or "" without f.
func fromPath(f *Sandbox, path func(*Sandbox) string) string {
	if f == nil {
		return ""
	}
	return path(f)
}

// adopt gives s, a warm sandbox of the pool whose workspace and /tmp are
// empty subvolumes already bound into it, copies of from's: snapshots of
// from's subvolumes, each mounted over s's own on the host. The mounts
// propagate into s's namespace (openStorage), where they are locked to
// the sandbox's user namespace, which cannot unmount them. A command
// started afterwards finds the copies; s must not have run one yet (its
// agent's directory stays on the empty workspace underneath).
func (s *Sandbox) adopt(from *Sandbox) error {
	for _, v := range []struct {
		own, from string
		limit     int64
	}{
		{s.workspace, from.workspace, s.spec.Limits.WorkspaceBytes},
		{s.tmp, from.tmp, s.spec.Limits.TmpBytes},
	} {
		cp := v.own + "-copy"
		if err := volume(cp, v.from, from.uid, s.uid, v.limit); err != nil {
			return err
		}
		if err := unix.Mount(cp, v.own, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("sandbox: storage: mount a copy: %w", err)
		}
		s.hostMounts = append(s.hostMounts, v.own)
	}
	return nil
}

// tmpMount is s's /tmp: its subvolume on storage, else a tmpfs of its
// size.
func (s *Sandbox) tmpMount() mount {
	if s.tmp != "" {
		return mount{op: "--bind", src: s.tmp, dst: "/tmp"}
	}
	return mount{op: "--tmpfs", dst: "/tmp", size: s.spec.Limits.TmpBytes}
}
