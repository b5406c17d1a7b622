//go:build !unix

package reservation

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
