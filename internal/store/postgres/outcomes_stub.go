package postgres

import (
	"context"
	"errors"

	"github.com/hookledger/hookledger/internal/store"
)

var errOutcomesPending = errors.New("outcomes: not in this driver yet")

// EffectDeadlineEscalate is not in this driver yet.
func (s *Store) EffectDeadlineEscalate(context.Context, *store.EffectDeadlineEscalateParams) ([]*store.Effect, error) {
	return nil, errOutcomesPending
}

// EffectCompensate is not in this driver yet.
func (s *Store) EffectCompensate(context.Context, *store.EffectCompensateParams) (*store.Effect, error) {
	return nil, errOutcomesPending
}

// VerifyNext is not in this driver yet.
func (s *Store) VerifyNext(context.Context, *store.VerifyNextParams) (*store.VerifyNextResult, error) {
	return nil, errOutcomesPending
}

// VerifyAdvance is not in this driver yet.
func (s *Store) VerifyAdvance(context.Context, *store.VerifyAdvanceParams) error {
	return errOutcomesPending
}

// EffectMismatch is not in this driver yet.
func (s *Store) EffectMismatch(context.Context, *store.EffectMismatchParams) (bool, error) {
	return false, errOutcomesPending
}

// InvariantCheck is not in this driver yet.
func (s *Store) InvariantCheck(context.Context, *store.InvariantCheckParams) (*store.InvariantCheckResult, error) {
	return nil, errOutcomesPending
}
