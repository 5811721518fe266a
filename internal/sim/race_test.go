//go:build race

package sim

// raceEnabled lowers the default seed count: the race detector slows the
// simulation down about fifteenfold.
const raceEnabled = true
