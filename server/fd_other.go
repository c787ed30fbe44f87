//go:build !unix

package server

import "errors"

// writeFd is not available here: direct hand-offs fall back to the loop.
func writeFd(int, []byte) (int, error) { return 0, errors.ErrUnsupported }
