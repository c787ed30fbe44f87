//go:build !soak

package soak

// longByTag selects the long sizes: built with -tags soak.
const longByTag = false
