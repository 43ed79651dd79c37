//go:build !unix

package configfile

// openNonBlocking: no such flag here; ReadFile still refuses what is not
// a regular file once it is open.
const openNonBlocking = 0
