//go:build !race

package jobutil

const raceEnabled = false
