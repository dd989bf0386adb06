package diskarchive

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/blobs"
)

// A directory archive (a checkpoint's: its memory image, its sparse disk image, its state) is
// zstd over: the magic "LBBDIRS1", then for each directory and regular file beneath the root
// in walk order a kind byte ('d' or 'f'), its slash-separated path (2 bytes of length, big
// endian, and the bytes) and its permission bits (4 bytes); a file then has its size and its
// data extents as in a disk archive (holes are not written). A kind byte 0 ends the entries;
// the SHA-256 of everything before it follows.

const dirMagic = "LBBDIRS1"

// WriteDir streams the tree at root into w as a directory archive. The tree must not change
// meanwhile; it may hold directories and regular files only.
func WriteDir(ctx context.Context, w io.Writer, root string) error {
	return writeStream(w, func(out *bufio.Writer) error {
		if _, err := out.WriteString(dirMagic); err != nil {
			return err
		}
		if err := writeTree(ctx, out, root); err != nil {
			return err
		}
		return out.WriteByte(0)
	})
}

// writeTree writes the entries of the tree at root.
func writeTree(ctx context.Context, out *bufio.Writer, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var kind byte
		switch {
		case d.IsDir():
			kind = 'd'
		case info.Mode().IsRegular():
			kind = 'f'
		default:
			return fmt.Errorf("diskarchive: %s is neither a directory nor a regular file", p)
		}
		name := filepath.ToSlash(rel)
		if len(name) > 0xffff {
			return fmt.Errorf("diskarchive: the path %s is too long", name)
		}
		var head [7]byte
		head[0] = kind
		binary.BigEndian.PutUint16(head[1:3], uint16(len(name)))
		binary.BigEndian.PutUint32(head[3:7], uint32(info.Mode().Perm()))
		if _, err := out.Write(head[:3]); err != nil {
			return err
		}
		if _, err := out.WriteString(name); err != nil {
			return err
		}
		if _, err := out.Write(head[3:]); err != nil {
			return err
		}
		if kind == 'd' {
			return nil
		}
		return writeFile(ctx, out, p)
	})
}

// writeFile writes the size and data extents of the file at p.
func writeFile(ctx context.Context, out io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := putU64(out, uint64(st.Size())); err != nil {
		return err
	}
	return writeExtents(ctx, out, f, st.Size())
}

// writeExtents writes the data extents of f (size bytes long) and the end extent.
func writeExtents(ctx context.Context, out io.Writer, f *os.File, size int64) error {
	in := blobs.ContextReader(ctx, f)
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("diskarchive: seeking data in %s: %w", f.Name(), err)
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("diskarchive: seeking a hole in %s: %w", f.Name(), err)
		}
		hole = min(hole, size)
		if _, err := f.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if err := putU64(out, uint64(data)); err != nil {
			return err
		}
		if err := putU64(out, uint64(hole-data)); err != nil {
			return err
		}
		if n, err := io.CopyN(out, in, hole-data); err != nil {
			return fmt.Errorf("diskarchive: reading %s at %d (%d of %d bytes): %w", f.Name(), data, n, hole-data, err)
		}
		off = hole
	}
	if err := putU64(out, 0); err != nil {
		return err
	}
	return putU64(out, 0)
}

// readExtents fills tmp (already size bytes long) from the extents in.
func readExtents(in io.Reader, tmp *os.File, size uint64) error {
	var ext [16]byte
	next := uint64(0)
	for {
		if _, err := io.ReadFull(in, ext[:]); err != nil {
			return fmt.Errorf("diskarchive: reading an extent: %w", err)
		}
		off, n := binary.BigEndian.Uint64(ext[:8]), binary.BigEndian.Uint64(ext[8:])
		if n == 0 {
			return nil
		}
		if off < next || off > size || n > size-off {
			return fmt.Errorf("diskarchive: extent %d+%d out of order or past the file's %d bytes", off, n, size)
		}
		if _, err := io.CopyN(io.NewOffsetWriter(tmp, int64(off)), in, int64(n)); err != nil {
			return fmt.Errorf("diskarchive: restoring the extent at %d: %w", off, err)
		}
		next = off + n
	}
}

// RestoreDir makes dir the tree r holds, replacing what is there once the whole archive is
// read and its checksum holds (a failed restore leaves dir as it was). The tree is built in a
// directory beside dir, which must be on the same filesystem.
func RestoreDir(ctx context.Context, r io.Reader, dir string) (err error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := readStream(ctx, r, func(in io.Reader) error { return readTree(in, tmp) }); err != nil {
		return err
	}
	old := tmp + ".old"
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.Rename(old, dir)
		return err
	}
	return os.RemoveAll(old)
}

// readTree makes the entries in under tmp.
func readTree(in io.Reader, tmp string) error {
	head := make([]byte, len(dirMagic))
	if _, err := io.ReadFull(in, head); err != nil {
		return fmt.Errorf("diskarchive: reading the header: %w", err)
	}
	if !bytes.Equal(head, []byte(dirMagic)) {
		return errors.New("diskarchive: not a directory archive")
	}
	var kind [1]byte
	var ent [6]byte
	for {
		if _, err := io.ReadFull(in, kind[:]); err != nil {
			return fmt.Errorf("diskarchive: reading an entry: %w", err)
		}
		if kind[0] == 0 {
			return nil
		}
		if _, err := io.ReadFull(in, ent[:2]); err != nil {
			return fmt.Errorf("diskarchive: reading an entry: %w", err)
		}
		name := make([]byte, binary.BigEndian.Uint16(ent[:2]))
		if _, err := io.ReadFull(in, name); err != nil {
			return fmt.Errorf("diskarchive: reading an entry's path: %w", err)
		}
		if _, err := io.ReadFull(in, ent[2:]); err != nil {
			return fmt.Errorf("diskarchive: reading an entry: %w", err)
		}
		rel := string(name)
		if !filepath.IsLocal(rel) || path.Clean(rel) != rel {
			return fmt.Errorf("diskarchive: the path %q leaves the directory", rel)
		}
		p := filepath.Join(tmp, filepath.FromSlash(rel))
		mode := os.FileMode(binary.BigEndian.Uint32(ent[2:])).Perm()
		switch kind[0] {
		case 'd':
			if err := os.Mkdir(p, mode|0o700); err != nil {
				return err
			}
		case 'f':
			if err := restoreFile(in, p, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("diskarchive: an entry of kind %d", kind[0])
		}
	}
}

func restoreFile(in io.Reader, p string, mode os.FileMode) (err error) {
	var b [8]byte
	if _, err := io.ReadFull(in, b[:]); err != nil {
		return fmt.Errorf("diskarchive: reading a file's size: %w", err)
	}
	size := binary.BigEndian.Uint64(b[:])
	if size > maxImage {
		return fmt.Errorf("diskarchive: a file of %d bytes is too large", size)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if err := f.Truncate(int64(size)); err != nil {
		return err
	}
	if err := readExtents(in, f, size); err != nil {
		return err
	}
	return f.Sync()
}
