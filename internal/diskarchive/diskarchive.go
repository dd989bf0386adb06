// Package diskarchive turns a sandbox's disk image (a sparse file: internal/runtime/hostdisk)
// into one compressed stream and back, so that a stopped sandbox's workspace can live in
// object storage (internal/blobs) and start again on another host; WriteDir and RestoreDir
// do the same for a directory of them (a checkpoint, dir.go).
//
// The stream is zstd over: the magic "LBBDISK1", the image's size (8 bytes, big endian), its
// data extents, each as offset and length (8 bytes each) and the bytes, an extent of length 0
// at offset 0 as the end, and the SHA-256 of everything before it. Holes are not written, so
// an image of 1 GiB holding a few MiB costs a few MiB to read and less to keep. Both ends
// stream: neither holds more than a buffer.
package diskarchive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/littlebigbrain/lbb/internal/blobs"
)

const magic = "LBBDISK1"

// maxImage bounds the size an archive may claim (a corrupt header must not make a huge file).
const maxImage = 1 << 42

// Write streams the image at path into w as an archive. The image must not change meanwhile
// (its sandbox is stopped).
func Write(ctx context.Context, w io.Writer, path string) error {
	return writeStream(w, func(out *bufio.Writer) error {
		if _, err := out.WriteString(magic); err != nil {
			return err
		}
		return writeFile(ctx, out, path) // its size, its extents
	})
}

// writeStream writes to w, zstd-compressed, what body writes to out, then its SHA-256.
func writeStream(w io.Writer, body func(out *bufio.Writer) error) (err error) {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	defer func() {
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
	}()
	h := sha256.New()
	out := bufio.NewWriterSize(io.MultiWriter(zw, h), 1<<20)
	if err := body(out); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	_, err = zw.Write(h.Sum(nil))
	return err
}

// readStream decompresses r and hands it to body, then checks that the SHA-256 of what body
// read follows, and nothing after it.
func readStream(ctx context.Context, r io.Reader, body func(in io.Reader) error) error {
	zr, err := zstd.NewReader(blobs.ContextReader(ctx, r), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer zr.Close()
	h := sha256.New()
	br := bufio.NewReaderSize(zr, 1<<20)
	if err := body(&hashReader{r: br, h: h}); err != nil {
		return err
	}
	want := h.Sum(nil)
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, got); err != nil {
		return fmt.Errorf("diskarchive: reading the checksum: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("diskarchive: checksum mismatch: the archive is corrupt")
	}
	if n, _ := io.Copy(io.Discard, br); n > 0 {
		return errors.New("diskarchive: bytes after the checksum")
	}
	return nil
}

func putU64(w io.Writer, v uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	_, err := w.Write(b[:])
	return err
}

// Restore writes the image r holds to path, replacing the file there when the whole archive
// is read and its checksum holds (a failed restore leaves path as it was). The new file takes
// the owner and mode of the file it replaces, or 0600.
func Restore(ctx context.Context, r io.Reader, path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".restore-")
	if err != nil {
		return err
	}
	defer func() {
		tmp.Close()
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	err = readStream(ctx, r, func(in io.Reader) error {
		head := make([]byte, len(magic)+8)
		if _, err := io.ReadFull(in, head); err != nil {
			return fmt.Errorf("diskarchive: reading the header: %w", err)
		}
		if !bytes.Equal(head[:len(magic)], []byte(magic)) {
			return errors.New("diskarchive: not a disk archive")
		}
		size := binary.BigEndian.Uint64(head[len(magic):])
		if size > maxImage {
			return fmt.Errorf("diskarchive: an image of %d bytes is too large", size)
		}
		if err := tmp.Truncate(int64(size)); err != nil {
			return err
		}
		return readExtents(in, tmp, size)
	})
	if err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	mode, uid, gid := os.FileMode(0o600), os.Getuid(), os.Getgid()
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
		if sys, ok := st.Sys().(*unix.Stat_t); ok {
			uid, gid = int(sys.Uid), int(sys.Gid)
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Chown(uid, gid); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// hashReader hashes what is read through it.
type hashReader struct {
	r io.Reader
	h hash.Hash
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}
