package host

import (
	"github.com/littlebigbrain/lbb/internal/store"
)

// capture keeps the head and the tail of a stream and counts its bytes.
type capture struct {
	headMax, tailMax int
	head, tail       []byte
	n                int64
}

func newCapture(head, tail int) *capture { return &capture{headMax: head, tailMax: tail} }

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.n += int64(n)
	if room := c.headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || c.tailMax == 0 {
		return n, nil
	}
	if len(p) >= c.tailMax {
		c.tail = append(c.tail[:0], p[len(p)-c.tailMax:]...)
	} else {
		if over := len(c.tail) + len(p) - c.tailMax; over > 0 {
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
		c.tail = append(c.tail, p...)
	}
	return n, nil
}

func (c *capture) output() store.Output {
	return store.Output{Head: string(c.head), Tail: string(c.tail), Bytes: c.n}
}
