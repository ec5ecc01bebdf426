//go:build race

package jobutil

// raceEnabled: the race detector changes what escapes to the heap, so
// allocation counts are checked only without it.
const raceEnabled = true
