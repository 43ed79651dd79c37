package configfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// FileError is a file that ReadFile could not use: the reason in words,
// without the file's path (the caller names the file its way: "Redis
// password (file /run/x)", "certificate file /etc/tls.crt").
type FileError struct {
	// Reason says what is wrong: "no such file", "a directory, not a
	// file", "larger than 65536 bytes".
	Reason string
	// Err is the cause, when there is one (for errors.Is(err,
	// os.ErrNotExist)).
	Err error
	// TooLarge: the file is larger than the bound.
	TooLarge bool
}

func (e *FileError) Error() string { return e.Reason }

// Unwrap returns the cause, or nil.
func (e *FileError) Unwrap() error { return e.Err }

// ReadFile reads a small file an operator names — a secret, a
// certificate, a key — of at most max bytes. It must be a regular file
// (a symbolic link to one is): a directory, a device or a named pipe is
// refused, and opening never blocks (a named pipe would wait for a
// writer). Every error is a *FileError.
func ReadFile(path string, max int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNonBlocking, 0)
	if err != nil {
		return nil, &FileError{Reason: reasonOf(err), Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &FileError{Reason: reasonOf(err), Err: err}
	}
	switch {
	case fi.IsDir():
		return nil, &FileError{Reason: "a directory, not a file"}
	case !fi.Mode().IsRegular():
		return nil, &FileError{Reason: "not a regular file (a device, a pipe or a socket)"}
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, &FileError{Reason: reasonOf(err), Err: err}
	}
	if len(b) > max {
		return nil, &FileError{Reason: fmt.Sprintf("larger than %d bytes: not the file it should be (is the path right?)", max), TooLarge: true}
	}
	return b, nil
}

// reasonOf says why a file could not be read, without its path.
func reasonOf(err error) string {
	var pe *os.PathError
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "no such file"
	case errors.Is(err, os.ErrPermission):
		return "cannot read it: permission denied"
	case errors.As(err, &pe):
		return "cannot " + pe.Op + " it: " + pe.Err.Error()
	}
	return err.Error()
}
