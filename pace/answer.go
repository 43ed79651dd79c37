package pace

import (
	"math"
	"net/http"
	"time"
)

// Answer is what one answer of the target means for a client that
// delivers work to it on its own (as sluice's relay does) rather than
// through a Transport.
type Answer struct {
	// Feedback is what the answer teaches a Pacer: the limits it states,
	// whether it throttled, and, when it did with a Retry-After, the hold
	// (Feedback.Hold) to apply in the same step.
	Feedback Feedback
	// Throttled: a 429, or a 503 with a Retry-After naming a future
	// instant. Such an answer spends no attempt.
	Throttled bool
	// Failed: another 5xx (but 501 and 505), or a round trip that failed
	// (err != nil): the target is failing, for the attempts and the breaker.
	Failed bool
	// RetryAfter is the wait a Retry-After asks for, at most maxWait; 0
	// when there is none, it cannot be read or it names a past instant.
	RetryAfter time.Duration
	// Capped: the Retry-After asked for more than maxWait.
	Capped bool
}

// ReadAnswer judges one answer (resp, or the round trip's error err) to a
// request sent at sent and answered at received, with the same rules a
// Transport applies: see RetryOptions for the three kinds of answer. Waits
// the answer asks for (a Retry-After, a reset of RateLimit or
// X-RateLimit-*) are cut to maxWait.
func ReadAnswer(resp *http.Response, err error, sent, received time.Time, maxWait time.Duration) Answer {
	var a Answer
	k := failed
	if err == nil && resp != nil {
		k = classify(resp, nil)
		if wait, capped, ok := retryAfter(resp.Header, received, maxWait); ok {
			a.RetryAfter, a.Capped = wait, capped
		}
	}
	a.Throttled, a.Failed = k == throttled, k == failed
	a.Feedback = feedbackOf(resp, sent, received, a.Throttled, maxWait)
	if a.Throttled && a.RetryAfter > 0 {
		a.Feedback.Hold = received.Add(a.RetryAfter)
	}
	return a
}

// Backoff is the full-jitter wait before retry n (1 for the first): a
// random duration, uniform in [0, min(maxDelay, base×2^(n−1))], both ends
// included — the backoff a Transport waits after a failure.
func Backoff(base, maxDelay time.Duration, n int) time.Duration {
	if maxDelay <= 0 {
		maxDelay = math.MaxInt64
	}
	return backoff(base, maxDelay, n)
}
