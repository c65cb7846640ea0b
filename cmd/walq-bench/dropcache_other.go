//go:build !(linux && (amd64 || arm64))

package main

import "errors"

func dropCache(string) error {
	return errors.New("-cold is only supported on Linux (amd64, arm64)")
}

func dropCacheFile(string) error {
	return errors.New("dropping the page cache is only supported on Linux (amd64, arm64)")
}
