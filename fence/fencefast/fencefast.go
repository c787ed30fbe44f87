// Package fencefast is fence's HTTP middleware for fasthttp: the same
// X-Fencing-Token header, the same Guard, the same answers (400 for a
// missing or malformed token, 409 for a stale one). It lives apart from
// fence so that fence stays a standard-library-only leaf.
package fencefast

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/fence"
)

// userValueKey is where Middleware stores the accepted token.
const userValueKey = "latchd.fence.token"

// SetHeader stamps an outgoing fasthttp request with tok.
func SetHeader(req *fasthttp.Request, tok fence.Token) {
	var b [fence.TokenLen]byte
	req.Header.SetBytesV(fence.Header, tok.AppendHex(b[:0]))
}

// FromRequest reads the token of an incoming request: fence.ErrNoToken when
// the header is absent or empty, fence.ErrBadToken when it does not parse.
func FromRequest(ctx *fasthttp.RequestCtx) (fence.Token, error) {
	v := ctx.Request.Header.Peek(fence.Header)
	if len(v) == 0 {
		return fence.Token{}, fence.ErrNoToken
	}
	return fence.Parse(v)
}

// TokenOf returns the token Middleware accepted for this request.
func TokenOf(ctx *fasthttp.RequestCtx) (fence.Token, bool) {
	t, ok := ctx.UserValue(userValueKey).(fence.Token)
	return t, ok
}

// Option configures Middleware.
type Option func(*config)

type config struct {
	resource func(*fasthttp.RequestCtx) string
}

// WithResource names the guarded resource of a request; the default is its
// path.
func WithResource(fn func(*fasthttp.RequestCtx) string) Option {
	return func(c *config) { c.resource = fn }
}

// Middleware guards next with g, as fencehttp.Handler does for
// net/http: next runs inside g.Do, so requests to one resource run one at a
// time and an older token never writes after a newer one.
func Middleware(g *fence.Guard, next fasthttp.RequestHandler, opts ...Option) fasthttp.RequestHandler {
	c := config{resource: func(ctx *fasthttp.RequestCtx) string { return string(ctx.Path()) }}
	for _, o := range opts {
		o(&c)
	}
	return func(ctx *fasthttp.RequestCtx) {
		tok, err := FromRequest(ctx)
		if err == nil && tok.IsZero() {
			err = fence.ErrBadToken
		}
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusBadRequest)
			return
		}
		err = g.Do(c.resource(ctx), tok, func() error {
			ctx.SetUserValue(userValueKey, tok)
			next(ctx)
			return nil
		})
		if errors.Is(err, fence.ErrStale) {
			ctx.Error(err.Error(), fasthttp.StatusConflict)
		}
	}
}
