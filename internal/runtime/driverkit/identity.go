//go:build linux

package driverkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/runtime/hostids"
	"github.com/littlebigbrain/lbb/internal/runtime/idmap"
	"github.com/littlebigbrain/lbb/internal/runtime/undo"
)

// Identity is who a sandbox is on the host.
type Identity struct {
	// Own is the sandbox's range (hostids): no other sandbox of the host holds it. Its first
	// id owns the sandbox's user namespace, so the kernel's per-user counts of what the
	// sandbox takes are the sandbox's own, not the host root's.
	Own hostids.Range
	// Mapped is the range the sandbox's ids 0..Count-1 are on the host: Own, where the host
	// makes idmapped mounts (its image and disk are then seen through them), else
	// hostids.Shared, the range every sandbox maps.
	Mapped hostids.Range
}

// Owner is the host uid that owns the sandbox's user namespace.
func (i Identity) Owner() uint32 { return i.Own.Base }

// identityFile holds a sandbox's claimed range, in its state directory.
const identityFile = "ids.json"

// IDMapCheck reports whether sandboxes of image can see it, and their disks, through
// idmapped mounts (nil when they can). A driver without it maps the shared range.
type IDMapCheck func(image string) error

// idmapCache remembers IDMapCheck's answers per image, and logs the first refusal.
type idmapCache struct {
	mu     sync.Mutex
	byPath map[string]error
	warned bool
}

func (s *Sandboxes[S]) idmapOK(image string) bool {
	if s.IDMap == nil {
		return false
	}
	c := &s.idmaps
	c.mu.Lock()
	defer c.mu.Unlock()
	err, ok := c.byPath[image]
	if !ok {
		err = s.IDMap(image)
		if c.byPath == nil {
			c.byPath = map[string]error{}
		}
		c.byPath[image] = err
	}
	if err != nil && !c.warned {
		c.warned = true
		s.Log.Warn("no per-sandbox host ids on this host: every sandbox maps the shared range "+
			"(each still owns its user namespace, so per-user kernel counts stay its own)", "err", err)
	}
	return err == nil
}

// claim gives sandbox id a range and records it in its state directory.
func (s *Sandboxes[S]) claim(id string) (hostids.Range, error) {
	r, err := s.IDs.Claim(s.claimant(id))
	if err != nil {
		return r, err
	}
	if err := WriteJSON(s.Path(id, identityFile), r); err != nil {
		return r, errors.Join(err, s.IDs.Release(r, s.claimant(id)))
	}
	return r, nil
}

// claimant is who holds sandbox id's range in the registry: its state directory, absolute (a
// claim whose directory is gone is free again).
func (s *Sandboxes[S]) claimant(id string) string {
	p, err := filepath.Abs(s.Path(id))
	if err != nil {
		return s.Path(id)
	}
	return p
}

// release gives back sandbox id's range, when it has one.
func (s *Sandboxes[S]) release(id string) error {
	var r hostids.Range
	if err := ReadJSON(s.Path(id, identityFile), id, &r); err != nil {
		return nil // none recorded (or the directory is gone): nothing held by this path
	}
	return s.IDs.Release(r, s.claimant(id))
}

// Identity answers who sandbox id is on the host for a start from image: its range (claimed
// again when its claim was lost, and claimed now for a sandbox made before ranges were), and
// what its ids map onto. It gives the sandbox's ids, and no other host user, passage through
// its run directory (0710, its root's group; RunPath).
//
// layers are read-only directories stacked over image (a template layer, runtime.Spec.Layer):
// the sandbox's own range needs idmapped mounts of each of them too.
func (s *Sandboxes[S]) Identity(id, image string, layers ...string) (Identity, error) {
	if s.IDs == nil {
		return Identity{}, errors.New("driverkit: this driver gives sandboxes no host ids")
	}
	var r hostids.Range
	err := ReadJSON(s.Path(id, identityFile), id, &r)
	if err == nil {
		var kept bool
		if kept, err = s.IDs.Keep(r, s.claimant(id)); err == nil && !kept {
			err = os.ErrNotExist // taken by another sandbox meanwhile: a new one
		}
	}
	if err != nil {
		if r, err = s.claim(id); err != nil {
			return Identity{}, fmt.Errorf("host ids: %w", err)
		}
	}
	ident := Identity{Own: r, Mapped: hostids.Shared}
	ok := s.idmapOK(image)
	for _, l := range layers {
		ok = ok && (l == "" || s.idmapOK(l))
	}
	if ok {
		ident.Mapped = r
	}
	// The run directory holds every path the sandbox's ids reach (RunPath).
	dir := s.RunPath(id)
	if err := os.Chown(dir, 0, int(ident.Mapped.Base)); err != nil {
		return ident, err
	}
	return ident, os.Chmod(dir, 0o710)
}

// The mount points of a started sandbox's views (Views), in its run directory (RunPath).
const (
	rootfsView = "rootfs"
	layerView  = "layer"
	// templateView is a template layer stacked over the image (runtime.Spec.Layer).
	templateView = "template"
)

// Views are the paths through which a started sandbox's ids reach its image and its disk.
type Views struct {
	// Rootfs is the image, read-only; Template the template layer over it, read-only ("":
	// none).
	Rootfs, Template string
	// Disk is the root of the sandbox's mounted disk.
	Disk string
}

// MountViews is the start step, after MountDisk, that shows sandbox id's image, template
// layer (template: "" is none) and disk to its ids: with its own range, through idmapped
// mounts at <id>/rootfs, <id>/template (read-only) and <id>/layer, which show the shared
// range they are stored with as ident.Mapped; with the shared range, the directories
// themselves and <id>/disk.
func (s *Sandboxes[S]) MountViews(u *undo.Stack, id, image, template string, ident Identity) (Views, error) {
	if ident.Mapped == hostids.Shared {
		return Views{Rootfs: image, Template: template, Disk: s.RunPath(id, "disk")}, nil
	}
	v := Views{Rootfs: s.RunPath(id, rootfsView), Disk: s.RunPath(id, layerView)}
	views := []struct {
		src, dst string
		attrs    idmap.Attrs
	}{{image, v.Rootfs, idmap.ReadOnly}, {s.RunPath(id, "disk"), v.Disk, idmap.Writable}}
	if template != "" {
		v.Template = s.RunPath(id, templateView)
		views = append(views, struct {
			src, dst string
			attrs    idmap.Attrs
		}{template, v.Template, idmap.ReadOnly})
	}
	err := u.Step("idmapped views", func() error {
		ns, err := idmap.Userns(hostids.Shared.Base, ident.Mapped.Base, ident.Mapped.Count)
		if err != nil {
			return err
		}
		defer ns.Close()
		for _, m := range views {
			if err := os.Mkdir(m.dst, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			if err := idmap.Mount(m.src, m.dst, ns, m.attrs); err != nil {
				return err
			}
		}
		return nil
	}, func() error { return unmountViews(s.RunPath(id)) })
	return v, err
}

// unmountViews unmounts what MountViews mounted in dir, a sandbox's state directory.
func unmountViews(dir string) error {
	var errs []error
	for _, v := range []string{rootfsView, layerView, templateView} {
		p := filepath.Join(dir, v)
		// Nothing of the sandbox uses them any more: detaching is as good as unmounting, and
		// does not wait for a dying mount namespace of the sandbox that still holds them.
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil &&
			!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// HostIDs is what the host shows of a running sandbox's identity: the mapping of its user
// namespace (its ids 0..Count-1 are host ids Base..) and the host uid that owns it.
type HostIDs struct {
	Base, Count, Owner uint32
}

// ProcessIDs reads the identity of the user namespace process pid runs in.
func ProcessIDs(pid int) (HostIDs, error) {
	var ids HostIDs
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		return ids, err
	}
	var inside uint32
	if _, err := fmt.Sscan(string(b), &inside, &ids.Base, &ids.Count); err != nil || inside != 0 {
		return ids, fmt.Errorf("uid_map of %d: %q %v", pid, b, err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		return ids, err
	}
	defer f.Close()
	const nsGetOwnerUID = 0xb704 // NS_GET_OWNER_UID: _IO(0xb7, 0x4)
	owner, err := unix.IoctlGetUint32(int(f.Fd()), nsGetOwnerUID)
	ids.Owner = owner
	return ids, err
}
