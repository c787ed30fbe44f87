package fencefast_test

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/latchd/latchd/fence"
	"github.com/latchd/latchd/fence/fencefast"
)

func TestMiddleware(t *testing.T) {
	g := fence.NewGuard()
	var seen []uint64
	h := fencefast.Middleware(g, func(ctx *fasthttp.RequestCtx) {
		tok, ok := fencefast.TokenOf(ctx)
		if !ok {
			t.Error("no token for the handler")
		}
		seen = append(seen, tok.Fence)
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	})
	tests := []struct {
		name string
		tok  *fence.Token
		raw  string
		path string
		want int
	}{
		{name: "first", tok: &fence.Token{Fence: 3, Salt: 1}, path: "/a", want: fasthttp.StatusNoContent},
		{name: "newer", tok: &fence.Token{Fence: 4, Salt: 1}, path: "/a", want: fasthttp.StatusNoContent},
		{name: "zombie", tok: &fence.Token{Fence: 3, Salt: 1}, path: "/a", want: fasthttp.StatusConflict},
		{name: "other path", tok: &fence.Token{Fence: 3, Salt: 1}, path: "/b", want: fasthttp.StatusNoContent},
		{name: "missing", path: "/a", want: fasthttp.StatusBadRequest},
		{name: "malformed", raw: "zz", path: "/a", want: fasthttp.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.SetRequestURI(tt.path)
			ctx.Request.Header.SetMethod(fasthttp.MethodPut)
			switch {
			case tt.tok != nil:
				fencefast.SetHeader(&ctx.Request, *tt.tok)
			case tt.raw != "":
				ctx.Request.Header.Set(fence.Header, tt.raw)
			}
			h(&ctx)
			if got := ctx.Response.StatusCode(); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
		})
	}
	if len(seen) != 3 || seen[0] != 3 || seen[1] != 4 || seen[2] != 3 {
		t.Fatalf("handler saw fences %v, want [3 4 3]", seen)
	}
}
