package flow

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/config"
)

// unsortInt reverses sortInt: false when key is not one of its encodings.
func unsortInt(key string) (int64, bool) {
	if len(key) != 20 {
		return 0, false
	}
	u, err := strconv.ParseUint(key, 10, 64)
	if err != nil {
		return 0, false
	}
	return int64(u ^ (1 << 63)), true
}

// occurredVersion is the version of an occurred_at order key, as prepare
// names it: "t" and the occurrence time, "/" and the tie-break.
func occurredVersion(key string) (string, bool) {
	micros, tb, ok := strings.Cut(key, "|")
	if !ok {
		return "", false
	}
	us, ok := unsortInt(micros)
	if !ok {
		return "", false
	}
	return "t" + time.UnixMicro(us).UTC().Format(time.RFC3339Nano) + "/" + tb, true
}

// VersionLabel is the version a stored version sort key stands for, as
// the flow names it in its projection and episode keys: "r3" for a
// revision, "t2026-01-02T03:04:05Z/evt_1" for an occurrence time and its
// tie-break, "h" and 16 hex digits for a hash. A key of no known shape
// comes back as it is.
func VersionLabel(sortKey string) string {
	if v, ok := occurredVersion(sortKey); ok {
		return v
	}
	if n, ok := unsortInt(sortKey); ok {
		return fmt.Sprintf("r%d", n)
	}
	if len(sortKey) == 64 && strings.Trim(sortKey, "0123456789abcdef") == "" {
		return "h" + sortKey[:16]
	}
	return sortKey
}

// OrderLabel is what a work item's order key means in a flow of the given
// version mode: the revision ("r3"), the occurrence time and tie-break
// (as VersionLabel), or for a refetching flow the arrival ("arrival #N",
// the event's place in the order of receipt). An unknown mode, or a key
// of no known shape, reads by the key's shape alone; what cannot be read
// comes back as it is.
func OrderLabel(mode, key string) string {
	if v, ok := occurredVersion(key); ok {
		return v
	}
	n, ok := unsortInt(key)
	switch {
	case !ok:
		return key
	case mode == config.ModeRefetch:
		return fmt.Sprintf("arrival #%d", n)
	case mode == config.ModeRevision:
		return fmt.Sprintf("r%d", n)
	}
	return strconv.FormatInt(n, 10)
}
