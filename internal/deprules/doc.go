// Package deprules holds, as a test, the rule of docs/DESIGN.md on heavy
// dependencies: each is imported by exactly one adapter package, and the
// packages a user takes alone (a middleware, the metrics, an adapter) do
// not drag in a client they do not use. The test runs `go list` over the
// module, so it checks the tree as it is, test files aside.
package deprules
