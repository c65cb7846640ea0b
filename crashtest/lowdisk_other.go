//go:build !linux

package crashtest

import "errors"

func mountLowDisk(string, int64) (func() error, error) {
	return nil, errors.New("crashtest: a low disk (Config.LowDisk) is a tmpfs: Linux only")
}
