// Package fencehttp is fence's middleware for net/http: a guarded handler
// reads the fencing token from the X-Fencing-Token header (fence.Header) and
// rejects a stale one, and a client stamps its requests with SetHeader. It
// lives apart from fence so that fence, which the engine imports, links no
// net/http; fence/fencefast is the same for fasthttp.
package fencehttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/latchd/latchd/fence"
)

// SetHeader stamps an outgoing request with tok.
func SetHeader(req *http.Request, tok fence.Token) {
	req.Header.Set(fence.Header, tok.String())
}

// FromRequest reads the token of an incoming request: ErrNoToken when the
// header is absent or empty, ErrBadToken when it does not parse.
func FromRequest(r *http.Request) (fence.Token, error) {
	v := r.Header.Get(fence.Header)
	if v == "" {
		return fence.Token{}, fence.ErrNoToken
	}
	return fence.ParseString(v)
}

type ctxKey struct{}

// FromContext returns the token the middleware accepted for this request.
func FromContext(ctx context.Context) (fence.Token, bool) {
	t, ok := ctx.Value(ctxKey{}).(fence.Token)
	return t, ok
}

// Option configures Handler and Middleware.
type Option func(*middleware)

type middleware struct {
	resource func(*http.Request) string
}

// WithResource names the guarded resource of a request; the default is
// its URL path, so each path has its own mark. Return a constant to guard
// a whole handler as one resource.
func WithResource(fn func(*http.Request) string) Option {
	return func(m *middleware) { m.resource = fn }
}

// Handler guards next with g: a request must carry a fencing token in
// fence.Header, not older than the newest accepted for its resource. next runs
// inside g.Do, so requests to one resource run one at a time, in an order
// that never lets an older token write after a newer one. The accepted
// token is in the request context (FromContext).
//
// Answers: 400 for a missing or malformed token, 409 Conflict for a stale
// one; next's answer otherwise.
func Handler(g *fence.Guard, next http.Handler, opts ...Option) http.Handler {
	m := middleware{resource: func(r *http.Request) string { return r.URL.Path }}
	for _, o := range opts {
		o(&m)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := FromRequest(r)
		if err == nil && tok.IsZero() {
			err = fence.ErrBadToken
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err = g.Do(m.resource(r), tok, func() error {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, tok)))
			return nil
		})
		if errors.Is(err, fence.ErrStale) {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
}

// Middleware is Handler in the func(http.Handler) http.Handler shape that
// routers chain.
func Middleware(g *fence.Guard, opts ...Option) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return Handler(g, next, opts...) }
}
