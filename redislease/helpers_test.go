package redislease_test

import (
	"strconv"
	"strings"
)

func itoa(v int64) string         { return strconv.FormatInt(v, 10) }
func contains(s, sub string) bool { return strings.Contains(s, sub) }
