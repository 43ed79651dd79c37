// Package bench holds sluice's benchmarks against the libraries it is
// measured against (golang.org/x/time/rate, sethvargo/go-limiter, …). It is
// a separate module so that those libraries never reach sluice's users'
// builds. Run it with `make bench`; docs/BENCHMARKS.md records the figures.
package bench
