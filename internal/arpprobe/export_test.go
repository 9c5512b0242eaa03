package arpprobe

// SetBeforeCollect makes ProbeConn run f between sending its requests and
// reading the answers (nil: nothing), for tests of a late prober.
func SetBeforeCollect(f func()) {
	if f == nil {
		f = func() {}
	}
	beforeCollect = f
}

// SetBeforeSend makes ProbeConn run f between opening its socket and
// sending its requests (nil: nothing).
func SetBeforeSend(f func()) {
	if f == nil {
		f = func() {}
	}
	beforeSend = f
}
