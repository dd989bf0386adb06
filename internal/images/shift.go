package images

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ShiftIDs moves every file under root into the host id range [base, base+count): uid N
// becomes base+N, and likewise for gids. A user namespace that maps 0..count-1 onto that
// range then sees the tree as its own root's files.
//
// Symlinks are changed themselves, never followed. Modes are put back after the chown, since
// chown clears setuid and setgid bits. File capabilities (security.capability) are not kept:
// user code runs with none. Ids already in the range are left alone, so a second run (or a
// hard link met twice) changes nothing; an id outside both ranges is an error.
func ShiftIDs(root string, base, count uint32) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat_t", path)
		}
		uid, err := shiftID(st.Uid, base, count)
		if err != nil {
			return fmt.Errorf("%s: uid: %w", path, err)
		}
		gid, err := shiftID(st.Gid, base, count)
		if err != nil {
			return fmt.Errorf("%s: gid: %w", path, err)
		}
		if uid == st.Uid && gid == st.Gid {
			return nil
		}
		if err := os.Lchown(path, int(uid), int(gid)); err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil // a symlink's mode means nothing, and chmod would follow it
		}
		if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
			// os.Chmod's FileMode cannot say every bit; the raw call keeps st_mode's low bits.
			if err := syscall.Chmod(path, st.Mode&07777); err != nil {
				return fmt.Errorf("%s: restore mode: %w", path, err)
			}
		}
		return nil
	})
}

func shiftID(id, base, count uint32) (uint32, error) {
	switch {
	case id < count:
		return base + id, nil
	case id >= base && id-base < count:
		return id, nil
	default:
		return 0, fmt.Errorf("id %d is outside 0..%d and the shifted range", id, count-1)
	}
}
