package boltqueue

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/queue"
)

// A record read back from the file is the record written; no bytes make
// the decoder panic, and whatever it accepts encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	r := record{state: queue.Leased, priority: 3, cost: 2.5, attempts: 2, maxAttempts: 25, enqueued: 1, readyAt: 2, until: 3, token: 9, key: "k", outcome: "503"}
	f.Add(r.encode())
	revived := record{state: queue.Queued, cost: 1, maxAttempts: 3, enqueued: 1, readyAt: 5, died: 4, outcome: "400 Bad Request"}
	f.Add(revived.encode())
	f.Add([]byte{})
	f.Add([]byte{1, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeRecord(b)
		if err != nil {
			return
		}
		if again := got.encode(); string(again) != string(b) && len(b) >= fixed {
			// A string length written with more bytes than it needs
			// is not kept: compare what is.
			back, err := decodeRecord(again)
			if err != nil || back != got {
				t.Fatalf("decode(encode(%+v)) = %+v, %v", got, back, err)
			}
		}
	})
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range []record{
		{state: queue.Dead, priority: 9, cost: 1, attempts: 3, maxAttempts: 3, finished: 7, key: "é", outcome: "deadline passed"},
		{state: queue.Scheduled, cost: 2, maxAttempts: 3, readyAt: 9, died: 7, outcome: "deadline passed"},
	} {
		got, err := decodeRecord(r.encode())
		if err != nil || got != r {
			t.Fatalf("round trip: %+v, %v; want %+v", got, err, r)
		}
	}
	// A record of the version before Revive (the sixth instant reserved,
	// zero) reads as never revived.
	old := record{state: queue.Dead, cost: 1, maxAttempts: 3, finished: 7}
	b := old.encode()
	if !bytes.Equal(b[59:67], make([]byte, 8)) {
		t.Fatalf("a never revived record writes %x where the reserved instant was", b[59:67])
	}
	if got, err := decodeRecord(b); err != nil || got.died != 0 {
		t.Fatalf("a record with the reserved instant zero: %+v, %v", got, err)
	}
	for _, id := range []string{"", "000000000000000g", "00000000000000001", "000000000000000A"} {
		if _, ok := parseID(id); ok {
			t.Errorf("parseID(%q) accepted", id)
		}
	}
	for _, tok := range []string{"", "0", "01", "x", "11111111111111111"} {
		if _, ok := parseToken(tok); ok {
			t.Errorf("parseToken(%q) accepted", tok)
		}
	}
	if v, ok := parseToken(formatToken(0x1a)); !ok || v != 0x1a {
		t.Errorf("parseToken(formatToken(0x1a)) = %x, %v", v, ok)
	}
}
