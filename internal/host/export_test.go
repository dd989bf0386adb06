package host

// ClaimDone is closed once c's sandbox is acquired (or failed to be).
func ClaimDone(c *Claim) <-chan struct{} { return c.done }
