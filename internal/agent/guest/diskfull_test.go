package guest

import "testing"

func TestDiskFullBytes(t *testing.T) {
	for _, c := range []struct {
		bsize, size uint64
		cpus        int
		want        uint64
	}{
		{4096, 64 << 20, 2, 1536 << 10}, // this machine: 1 MiB watermark, ×1.5
		{4096, 64 << 20, 1, 1 << 20},    // 768 KiB: the 1 MiB floor
		{4096, 64 << 20, 64, 8 << 20},   // 192 MiB: capped at an eighth of the disk
		{4096, 10 << 30, 64, 192 << 20}, // a large disk on many CPUs
		{1024, 4 << 20, 2, 1 << 20},     // a tiny disk: the floor
	} {
		if got := diskFullBytes(c.bsize, c.size, c.cpus); got != c.want {
			t.Errorf("diskFullBytes(%d, %d, %d) = %d, want %d", c.bsize, c.size, c.cpus, got, c.want)
		}
	}
}
