package postgres

import (
	"context"
	"errors"

	"github.com/hookledger/hookledger/internal/store"
)

var errSignalsPending = errors.New("outcome signals: not in this driver yet")

// SignalSnapshot is not in this driver yet.
func (s *Store) SignalSnapshot(context.Context, *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	return nil, errSignalsPending
}

// SignalHistoryRecord is not in this driver yet.
func (s *Store) SignalHistoryRecord(context.Context, *store.SignalHistoryRecordParams) error {
	return errSignalsPending
}

// SignalHistoryList is not in this driver yet.
func (s *Store) SignalHistoryList(context.Context, *store.SignalHistoryListParams) ([]*store.SignalPoint, error) {
	return nil, errSignalsPending
}
