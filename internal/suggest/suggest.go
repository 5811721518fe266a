// Package suggest finds the valid word nearest a mistyped one, for the
// "did you mean" of an unknown verb or config key. It is the edit
// distance of short words, not a spelling engine: a word is suggested
// only when a slip of a key or two explains the difference.
package suggest

// Nearest returns the word of valid closest to word, and false when none
// is close enough to be what was meant: at most two edits away, and fewer
// edits than half the word's length (so that "x" suggests nothing). Ties
// go to the earlier word of valid.
func Nearest(word string, valid []string) (string, bool) {
	best, bestD := "", -1
	for _, v := range valid {
		if d := distance(word, v); bestD < 0 || d < bestD {
			best, bestD = v, d
		}
	}
	if bestD < 0 || bestD == 0 || bestD > 2 || 2*bestD >= len([]rune(word)) {
		return "", false
	}
	return best, true
}

// distance is the optimal string alignment distance of a and b: the
// insertions, deletions, substitutions and swaps of two neighbouring
// characters that turn one into the other. A swap counts once, since
// "stauts" for "status" is one slip, not two.
func distance(a, b string) int {
	x, y := []rune(a), []rune(b)
	// d[i][j] is the distance of x[:i] and y[:j]; three rows suffice.
	prev2 := make([]int, len(y)+1)
	prev := make([]int, len(y)+1)
	cur := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(y)]
}
