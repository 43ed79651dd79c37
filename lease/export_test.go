package lease

// Naive makes o the negative control: a Holder that trusts a lease until
// the Coordinator says it is lost (no local deadline, no quarantine).
func Naive(o Options) Options {
	o.naive = true
	return o
}
