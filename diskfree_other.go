//go:build !unix

package walq

// diskFree cannot tell here.
func diskFree(string) (int64, bool) { return 0, false }
