package etcdlease

import (
	"strconv"
	"strings"
)

// keys names the keys of one group; see the package documentation.
type keys struct {
	base string // "<prefix>/<group>/@"
}

func (c *Coordinator) keys(group string) keys {
	return keys{base: c.prefix + "/" + group + "/@"}
}

// members is the prefix of the member keys.
func (k keys) members() string { return k.base + "m/" }

func (k keys) member(id string) string { return k.members() + id }

// partitions is the prefix of the partition keys.
func (k keys) partitions() string { return k.base + "p/" }

func (k keys) holder(p int) string { return k.partition(p) + "holder" }
func (k keys) until(p int) string  { return k.partition(p) + "until" }
func (k keys) given(p int) string  { return k.partition(p) + "given" }

func (k keys) partition(p int) string { return k.partitions() + strconv.Itoa(p) + "/" }

// partitionKey parses a key under partitions into its partition and field
// ("holder", "until" or "given"); ok is false for any other key.
func (k keys) partitionKey(key string) (p int, field string, ok bool) {
	rest, ok1 := strings.CutPrefix(key, k.partitions())
	n, field, ok2 := strings.Cut(rest, "/")
	p, err := strconv.Atoi(n)
	if !ok1 || !ok2 || err != nil || p < 0 || strconv.Itoa(p) != n {
		return 0, "", false
	}
	switch field {
	case "holder", "until", "given":
		return p, field, true
	}
	return 0, "", false
}
