// Command printversion prints buildinfo.Get(), for buildinfo's tests.
package main

import (
	"fmt"

	"github.com/latchd/latchd/internal/buildinfo"
)

func main() { fmt.Println(buildinfo.Get()) }
