package httpfast

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"time"
)

// lockBody is every field a lock or semaphore request may carry; each
// route checks that only its own are present. Pointers tell a missing
// field from a zero one.
type lockBody struct {
	AcquireTimeoutS *float64 `json:"acquire_timeout_s"`
	WaitTimeoutS    *float64 `json:"wait_timeout_s"`
	LeaseTTLS       *float64 `json:"lease_ttl_s"`
	Limit           *int64   `json:"limit"`
	Token           *string  `json:"token"`
	LockDelayS      *float64 `json:"lock_delay_s"`
}

// bodyErr is a request body the route refuses; its text is the message.
type bodyErr string

func (e bodyErr) Error() string { return string(e) }

// decodeBody decodes a JSON object into v, refusing wrong types, trailing
// data and, if strict, unknown fields. An empty body is an empty object.
func decodeBody(body []byte, v any, strict bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return bodyErr("invalid JSON body: " + err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bodyErr("invalid JSON body: trailing data after the object")
	}
	return nil
}

// fields names which lockBody fields a route allows.
type fields uint8

const (
	fAcquireTimeout fields = 1 << iota
	fWaitTimeout
	fLeaseTTL
	fLimit
	fToken
	fLockDelay
)

// check refuses fields the route does not take, and requires limit where
// allowed (a semaphore's acquire and enqueue).
func (b *lockBody) check(allowed fields) error {
	present := []struct {
		set  bool
		f    fields
		name string
	}{
		{b.AcquireTimeoutS != nil, fAcquireTimeout, "acquire_timeout_s"},
		{b.WaitTimeoutS != nil, fWaitTimeout, "wait_timeout_s"},
		{b.LeaseTTLS != nil, fLeaseTTL, "lease_ttl_s"},
		{b.Limit != nil, fLimit, "limit"},
		{b.Token != nil, fToken, "token"},
		{b.LockDelayS != nil, fLockDelay, "lock_delay_s"},
	}
	for _, p := range present {
		if p.set && allowed&p.f == 0 {
			return bodyErr(`invalid JSON body: json: unknown field "` + p.name + `"`)
		}
	}
	if allowed&fLimit != 0 {
		if b.Limit == nil {
			return bodyErr("limit is required")
		}
		if *b.Limit < 1 || *b.Limit > math.MaxInt32 {
			return bodyErr("limit must be an integer in [1, 2147483647]")
		}
	}
	return nil
}

// lockDelay converts the optional lock_delay_s to an
// engine.AcquireReq.LockDelay: absent is 0 (the server's), 0 is none
// (< 0), else the delay.
func lockDelay(v *float64) (time.Duration, error) {
	d, err := seconds(v, "lock_delay_s", false)
	if v != nil && err == nil && d == 0 {
		d = -1
	}
	return d, err
}

// seconds converts an optional field of seconds to a duration: absent is
// 0; present must be in [0, maxSeconds], and > 0 if positive is set.
func seconds(v *float64, name string, positive bool) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	s := *v
	switch {
	case positive && !(s > 0):
		return 0, bodyErr(name + " must be > 0")
	case !(s >= 0):
		return 0, bodyErr(name + " must be >= 0")
	case s > maxSeconds:
		return 0, bodyErr(name + " must be <= 2147483647")
	}
	d := time.Duration(s * float64(time.Second))
	if positive && d <= 0 {
		return 0, bodyErr(name + " must be at least 1ns")
	}
	return d, nil
}
