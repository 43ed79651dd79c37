// Package tools pins the versions of the developer tools sluice's Makefile
// and CI run (staticcheck, benchstat), in a module of their own so that they
// never reach sluice's users. Run one with
// `go tool -modfile=tools/go.mod staticcheck ./...`.
package tools
