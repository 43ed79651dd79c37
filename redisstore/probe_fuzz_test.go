package redisstore

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// FuzzReadReply: whatever a server sends the probe — a Redis, something
// else on its port, an attacker in the middle of a clear-text link —
// readReply answers without panicking, reads no more than the reply and
// holds nothing larger than its bounds.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{
		"+PONG\r\n", "-WRONGPASS invalid username-password pair\r\n", ":42\r\n", "$5\r\nhello\r\n", "$-1\r\n",
		"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n", "*-1\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "$99999999\r\n", "HTTP/1.1 400 Bad Request\r\n\r\n",
		"\x15\x03\x03\x00\x02\x02\x28", "+no end",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := readReply(bufio.NewReaderSize(bytes.NewReader(data), 512), 0)
		if err != nil {
			return
		}
		var walk func(v any, depth int)
		walk = func(v any, depth int) {
			if depth > 3 {
				t.Fatalf("a reply nested %d deep", depth)
			}
			switch x := v.(type) {
			case string:
				if len(x) > maxReply {
					t.Fatalf("a %d-byte string", len(x))
				}
			case replyError:
				if strings.ContainsAny(string(x), "\r\n") {
					t.Fatalf("an error reply with a line break: %q", x)
				}
			case []any:
				if len(x) > maxReply {
					t.Fatalf("a %d-element array", len(x))
				}
				for _, e := range x {
					walk(e, depth+1)
				}
			}
		}
		walk(v, 0)
	})
}
