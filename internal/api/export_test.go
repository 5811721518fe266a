package api

// QueryParams are the query parameters each list reads, by route, for
// the test that holds the OpenAPI document to them.
var QueryParams = map[string][]string{
	"GET /api/v1/events":          eventParams,
	"GET /api/v1/audit":           auditParams,
	"GET /api/v1/effects":         EffectParams,
	"GET /api/v1/exceptions":      exceptionParams,
	"GET /api/v1/signals/history": signalHistoryParams,
}
