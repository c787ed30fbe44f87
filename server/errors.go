package server

import "errors"

// Reasons a connection is closed, for the debug log.
var (
	errNotAuthed        = errors.New("server: request before auth")
	errBadAuth          = errors.New("server: wrong auth token")
	errAuthLimited      = errors.New("server: auth refused: too many failures from this IP")
	errParkedOverflow   = errors.New("server: too many bytes pipelined behind a waiting request")
	errOutboundOverflow = errors.New("server: client does not read its answers")
	errOutputBudget     = errors.New("server: output budget spent; connection holds the most unsent output")
	errWriteTimeout     = errors.New("server: answers unsent past the write timeout")
)
