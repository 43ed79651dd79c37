package upstream

// SkipIdleCheck makes c reuse idle connections without looking at them
// first: the negative control of the idle check's test.
func SkipIdleCheck(c *Client) { c.unchecked = true }
