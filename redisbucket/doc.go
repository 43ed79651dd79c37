// Package redisbucket shares a rate limit among the processes of a fleet
// through one token bucket in Redis, from which each process takes tokens
// a slice at a time. It is the second coordination mode beside package
// lease (partitions held under leases), for comparison; the end of this
// comment says when each is the better choice.
//
// # How
//
// The limit, L tokens per second with burst B, is one bucket in one Redis
// key, "<Prefix>{<Limit.Name>}" (its hash tag keeps it whole on a Redis
// Cluster). Each process has a Budget on it. Wait spends from the tokens
// the process holds; when they fall short of a cost, one EVALSHA of
// take.lua refills the bucket by Redis TIME and, atomically, takes what
// the process misses, topped up to a slice (Options.Slice, L × 100 ms by
// default) if the bucket holds that much, or nothing if it does not hold
// the missing part. The answer carries the bucket's level, so the process
// knows when the next slice will be there at the earliest (other
// processes only ever take) and sleeps until then before it asks again.
// The arithmetic is exact integers, as in package redisscript.
//
// # The bound
//
// Over any interval of length T the fleet admits at most
//
//	B + L×T + N×S
//
// where N is the number of Budgets that share the bucket and S is the
// larger of Slice and the largest cost waited for. The bucket grants at
// most B + L×T in the interval; a process never holds more than S (it
// tops up to S, or to the cost it waits for), and what the processes
// held when the interval began is the mode's extra burst. A fleet whose
// processes hold nothing — a start, or a bucket unused long enough to
// fill — admits at most B + L×T. Tokens are never made locally; the ones
// a process holds stay until spent, are dropped by Close, and a call
// whose reply was lost may have taken some that no one spends: all of
// this makes the fleet admit less, never more.
//
// # Failures
//
// A Wait that needs a slice while Redis is down returns an error wrapping
// the cause: at once when the connection is refused, after
// Options.Timeout when Redis does not answer. Waits that the held tokens
// cover still succeed. No call is retried, and there is no fallback: the
// caller decides whether to fail, wait, or admit on its own (at L/N, say).
//
// Processes that share a Name share the bucket whatever their Limits: a
// call refills at its own rate and caps the level at its own burst,
// keeping the whole tokens left, so during a rollout that changes the
// limit the bucket never holds more than the larger burst. The Name is
// stored in Redis as it is: it must not carry a raw identity.
//
// # Figures
//
// Measured with `go test -race -count=1 -v ./redisbucket` and
// `go test -run '^$' -bench Wait -benchtime 2s -count 4 ./redisbucket` on a
// loaded 2-vCPU VM (load average 6 to 12), Redis 7.0 on loopback;
// L = 100/s, B = 10, Slice = 10, T = 2 s, every process always short of
// tokens:
//
//   - one process (TestOneProcess): 185–206 admitted (B + L×T = 210; the
//     slice is the whole burst, so a late wake-up loses refill); 20–21
//     slices in 21–22 round trips, the extra one the EVAL after NOSCRIPT;
//   - four processes (TestFleet): 196–208 admitted in total, the busiest
//     1 s window 106–109 (L + B + N×S = 150); 80–84 round trips, about 4
//     per slice: each process asks when the slice is due, one gets it;
//   - a round trip, a slice, costs 63–88 µs and 12 allocations, against
//     58–117 µs for a decision of redisstore on the same Redis (the
//     benchmark's anchor); spread over slices of 10 and 100 tokens, a
//     Wait costs about 7 µs and 1 µs.
//
// So Redis serves about L/S calls per second while one process is short of
// tokens, and up to N×L/S while N are.
//
// # When to use which
//
// The shared bucket (this package) is the better choice when
//   - demand moves quickly between processes: any process may use all of
//     L at once, with no rebalancing, whereas leases follow demand at each
//     renewal (every TTL/3) and in whole partitions of L/P;
//   - the fleet is small, or its size changes often: a lease hand-over
//     after a crash leaves the partition unspent for TTL plus the drift
//     margin;
//   - costs are large against L/P: a cost above a partition's burst B/P
//     never fits a lease, while here it only needs to fit B;
//   - the extra burst N×S is acceptable (S can be made small, at the price
//     of more calls).
//
// Leased partitions (package lease) are the better choice when
//   - the limit must hold exactly, B + L×T, with fencing epochs for the
//     targets;
//   - Redis must stay off the request path: a lease holder makes about
//     3/TTL calls per second whatever its traffic, where the Budgets make
//     L/S to N×L/S together (at L = 100 000/s, S = 10 000 and 50
//     processes all short of tokens, 500 calls per second);
//   - the fleet must ride out a coordinator outage: holders spend their
//     partitions until the lease runs out, where a Budget stops after the
//     tokens it holds;
//   - demand is steady and spread over many processes.
package redisbucket
