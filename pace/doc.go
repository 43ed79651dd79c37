// Package pace is the client side of a rate limit: it sends work to a
// limited target at a controlled pace, instead of firing everything and
// retrying what the target refuses: 10,000 records for a target that allows
// 100 per second, fired at once and retried on failure, become several times
// as many sends; paced, they are 10,000 sends.
//
//   - Pacer releases work in first-come, first-served order when its cost fits
//     every limit: the target's known limits (several windows at once, on the
//     foundation's exact algorithms), spaced evenly (100 per second goes out
//     one every 10 ms, never in batches, unless a Burst is set: then at most
//     that many, and a slice's share, at once); a concurrency cap; the limits
//     it learns from the target's RateLimit-Policy and RateLimit fields; and
//     an adaptive rate (CUBIC) when the target throttles unexpectedly. Told
//     nothing of the target, it begins with a slow start: 5 per second,
//     doubling every 50 ms of answers until the first 429 or RateLimit-Policy
//     (AdaptiveOptions.Initial starts it at a rate learned before). Leaving
//     the queue (a canceled context) gives the place and its capacity to the
//     work behind.
//   - Transport is an http.RoundTripper that puts any http.Client behind a
//     Pacer, retries with capped exponential backoff and full jitter, honours
//     Retry-After as a floor for every request to the target (throttled
//     answers never spend an attempt), keeps retries within a budget, retries
//     a request that is not idempotent only when it carries an idempotency
//     key, and stops sending to a failing target with a circuit Breaker.
//   - Stats of each report the effective rate, the rate in use, the time
//     spent waiting, the 429s, the retries and the breaker's state; package
//     metrics exports them to Prometheus.
//
// Time is the runtime's clock and timers: nothing here starts a goroutine of
// its own, and tests drive every behaviour on testing/synctest's fake clock.
package pace
