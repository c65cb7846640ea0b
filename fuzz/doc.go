// Package fuzz holds walq's native fuzz targets that cross package lines:
// the record envelope and body decoders together, the snapshot file and
// body decoders together, recovery (walq.Open) over arbitrary segment and
// snapshot files, and random operation sequences against a live queue
// checked against a plain model.
//
// The committed corpora under testdata/fuzz run as ordinary tests with
// go test; fuzz/run.sh fuzzes each target in turn:
//
//	fuzz/run.sh 10m
//
// Every crasher a fuzzer finds is committed under testdata/fuzz as a
// regression seed.
package fuzz
