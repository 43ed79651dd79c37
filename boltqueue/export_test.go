package boltqueue

import "context"

// SetCrashHook sets the function called at the named crash points
// ("enqueue-synced", "lease-committed", "mid-commit",
// "answered-before-commit"); the crash tests' child process kills itself
// there.
func SetCrashHook(f func(point string)) { crashHook = f }

// AckBeforeCommit returns o answering Enqueue before its commit is durable:
// the negative control of the crash tests.
func AckBeforeCommit(o Options) Options {
	o.ackBeforeCommit = true
	return o
}

// Purge runs the janitor's purge once, now, in a commit of its own.
func Purge(q *Queue) error {
	return q.submit(context.Background(), &op{apply: func(w *writer) error { return w.purge(purgeBatch) }})
}
